"""Accounting mode: prompts longer than the model takes are answered on a window, the ledger (a K/V-less block
manager) keeping the prefix cache's ground truth for the whole prompt. Figures computed by hand below."""
import random
import subprocess
import sys

import pytest

from localengine.accounting import PrefixLedger, Window, plan_window

BS = 4


def test_the_ledger_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None; import localengine.accounting"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_prompt_that_fits_is_run_whole():
    assert plan_window(1000, 1020, 255, 382) == Window(1000, 1000, 1000)
    assert Window.whole(10).is_whole and Window.whole(10).select([1, 2, 3]) == [1, 2, 3]


def test_the_window_is_the_head_and_a_tail_starting_on_the_grid():
    # 3,000 tokens, room for 1,020: head 255, tail at most 765, so from 3,000 - 765 = 2,235 rounded up to a
    # multiple of 382: 2,292 (6 x 382)
    w = plan_window(3000, 1020, 255, 382)
    assert (w.head, w.tail_start, w.model_tokens) == (255, 2292, 255 + 708)
    ids = list(range(3000))
    assert w.select(ids) == ids[:255] + ids[2292:]
    assert w.to_json() == {"attended": [[0, 255], [2292, 3000]], "accounted_only": [[255, 2292]]}
    # 150 more tokens: 2,385 rounds up to 2,674 (7 x 382); up to 57 more (2,235 + 57 = 2,292) keep 2,292
    assert plan_window(3150, 1020, 255, 382).tail_start == 2674
    assert plan_window(3057, 1020, 255, 382).tail_start == 2292 and plan_window(3058, 1020, 255, 382).tail_start == 2674


def _computed(ledger: PrefixLedger, ids: list[int]) -> int:
    seq = ledger.admit(ids)
    cached = seq.num_cached_tokens
    ledger.computed(seq)
    ledger.release(seq)
    return cached


def test_the_ledger_reuses_whole_blocks_of_the_same_prefix():
    ledger = PrefixLedger(64, BS)
    prompt = list(range(10, 30))  # 20 tokens: 5 full blocks
    assert _computed(ledger, prompt) == 0
    assert _computed(ledger, prompt) == 16  # 4 blocks: the last token is always computed
    assert _computed(ledger, prompt + [99] * 7) == 20  # the whole earlier prompt
    changed = prompt[:9] + [0] + prompt[10:]
    assert _computed(ledger, changed) == 8  # blocks 0 and 1; block 2 holds the changed token


def test_the_ledger_evicts_least_recently_used_blocks_shared_prefixes_last():
    ledger = PrefixLedger(4, BS)
    first, second = list(range(100, 112)), list(range(200, 212))  # 3 blocks each
    _computed(ledger, first)  # released tail first: the free queue is now [3, 2(first's tail), 1, 0(head)]
    _computed(ledger, second)  # takes blocks 3, 2, 1: first's head block survives
    assert _computed(ledger, first) == 4
    assert ledger.admit(list(range(300, 320))) is None  # 5 blocks never fit 4: nothing is known


@pytest.fixture(scope="module")
def engine():
    from localengine import Engine
    from localengine.config import AccountingConfig

    return Engine(model="tiny-random", dtype="float64", block_size=BS, num_blocks=600,
                  accounting=AccountingConfig())


def _tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 259) for _ in range(n)]


def test_an_engine_without_accounting_refuses_a_prompt_over_the_context():
    from localengine import Engine

    with pytest.raises(ValueError, match="context length"):
        Engine(model="tiny-random", dtype="float64", block_size=BS).generate(_tokens(1100, 5), max_tokens=1)


def test_a_prompt_over_the_context_runs_on_its_window(engine):
    from localengine import Engine

    prompt = _tokens(3000, 1)  # the tiny model's context is 1,024 tokens
    window = engine.window_for(3000)  # no reply: room for 1,024; head 256, tail <= 768 on a grid of 384
    assert (window.head, window.tail_start) == (256, 2304)
    result = engine.logits(prompt)
    fresh = Engine(model="tiny-random", dtype="float64", block_size=BS, num_blocks=600)  # no accounting
    assert (result.logits - fresh.logits(window.select(prompt)).logits).abs().max().item() == 0.0


def test_the_next_turn_reads_the_whole_earlier_prompt_from_the_ledger(engine):
    engine.clear_cache()
    first = _tokens(3000, 2)
    one = engine.generate(first, max_tokens=4)
    assert (one.num_prompt_tokens, one.num_cached_tokens) == (3000, 0)
    two = engine.generate(first + _tokens(100, 3), max_tokens=4)
    assert (two.num_prompt_tokens, two.num_cached_tokens) == (3100, 3000)
    # the K/V store holds the window: the head's 63 full blocks (252 tokens) are reused, the tail moved
    assert two.window.head == 255 and two.model_cached_tokens == 252
