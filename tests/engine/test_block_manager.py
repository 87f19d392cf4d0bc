"""The KV block manager and scheduler: plain Python, tested without torch."""

import subprocess
import sys

from localengine.block_manager import BlockManager
from localengine.config import SchedulerConfig
from localengine.scheduler import Scheduler
from localengine.sequence import SamplingParams, Sequence

BS = 4


def seq(tokens, **params) -> Sequence:
    return Sequence(list(tokens), SamplingParams(**params), BS)


def run_prefill(bm: BlockManager, s: Sequence) -> Sequence:
    """Allocate and mark the prompt computed, as one engine step does."""
    assert bm.allocate(s)
    s.num_computed_tokens = s.num_tokens
    bm.publish(s)
    return s


def test_control_plane_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None; import localengine.block_manager, localengine.scheduler"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_only_full_blocks_are_reused_and_the_last_prompt_token_is_always_computed():
    bm = BlockManager(16, BS)
    bm.deallocate(run_prefill(bm, seq(range(10))))  # blocks: 4 + 4 + 2
    again = seq(range(10))
    assert bm.allocate(again)
    assert again.num_cached_tokens == 8  # the partial third block is never shared
    exact_multiple = seq(range(8))
    assert bm.allocate(exact_multiple)
    assert exact_multiple.num_cached_tokens == 4  # 8 cached would leave no token to compute
    assert bm.stats.prefix_hits == 12 and bm.stats.prefix_queries == 10 + 10 + 8


def test_a_hit_needs_the_same_prefix_not_just_the_same_block():
    bm = BlockManager(16, BS)
    bm.deallocate(run_prefill(bm, seq([1, 2, 3, 4, 5, 6, 7, 8, 9])))
    other_head = seq([0, 2, 3, 4, 5, 6, 7, 8, 9])  # same second block, different first block
    assert bm.allocate(other_head)
    assert other_head.num_cached_tokens == 0


def test_a_hash_hit_is_confirmed_by_comparing_token_ids():
    bm = BlockManager(16, BS)
    first = run_prefill(bm, seq(range(9)))
    bm.deallocate(first)
    # Simulate a hash collision: the block registered under this hash now holds other tokens.
    bm.blocks[first.block_hashes and bm.hash_to_block_id[first.block_hashes[0]]].token_ids = (9, 9, 9, 9)
    again = seq(range(9))
    assert bm.allocate(again)
    assert again.num_cached_tokens == 0


def test_a_block_in_use_is_never_handed_to_another_request():
    bm = BlockManager(6, BS)
    running = run_prefill(bm, seq(range(9)))  # 3 blocks, published, still referenced
    sharer = seq(list(range(8)) + [99])
    assert bm.allocate(sharer)  # shares 2 full blocks, takes 1 fresh block
    assert bm.blocks[running.block_table[0]].ref_count == 2
    bm.deallocate(sharer)  # drops its references: the shared blocks stay in use by `running`
    assert bm.num_free_blocks == 3
    others = [seq([100 + i] * 3) for i in range(3)]
    for other in others:
        assert bm.allocate(other)
        assert not set(other.block_table) & set(running.block_table)
    assert not bm.allocate(seq([7] * 3))  # nothing free: refuse rather than take a used block
    assert bm.stats.evictions == 0  # only never-cached blocks were handed out


def test_freed_blocks_keep_their_contents_until_reallocated():
    bm = BlockManager(4, BS)
    bm.deallocate(run_prefill(bm, seq(range(9))))  # 3 blocks freed, 2 of them full and published
    assert bm.num_free_blocks == 4 and bm.num_cached_free_blocks == 2
    again = seq(range(9))
    assert bm.allocate(again) and again.num_cached_tokens == 8
    bm.deallocate(again)
    big = seq(range(100, 116))  # 4 blocks: every block is reallocated
    assert bm.allocate(big)
    assert bm.stats.evictions == 2 and bm.num_cached_free_blocks == 0
    bm.deallocate(big)
    returning = seq(range(9))
    assert bm.allocate(returning) and returning.num_cached_tokens == 0


def _hits_after_pressure(tail_first: bool) -> int:
    bm = BlockManager(10, BS, release_tail_first=tail_first)
    prompt = list(range(33))  # 8 full blocks + 1 token
    bm.deallocate(run_prefill(bm, seq(prompt)))
    bm.deallocate(run_prefill(bm, seq(range(500, 516))))  # an unrelated request needs 4 blocks
    returning = seq(prompt)
    assert bm.allocate(returning)
    return returning.num_cached_tokens


def test_tail_first_release_keeps_more_hits_than_head_first():
    tail_first, head_first = _hits_after_pressure(True), _hits_after_pressure(False)
    # Free queue: 1 never-used block, then the 9 released ones; the unrelated request takes 4 of them.
    assert tail_first == 24  # the partial block and blocks 7, 6 went: blocks 0..5 still hit
    assert head_first == 0  # the chain's head was evicted, so nothing after it can be reached
    assert tail_first > head_first


def test_a_shared_partial_last_block_is_copied_before_appending():
    bm = BlockManager(8, BS)
    parent = run_prefill(bm, seq(range(6)))  # blocks: full + 2 tokens
    child = seq(range(6))
    bm.fork(parent, child)
    shared_last = parent.block_table[-1]
    assert bm.blocks[shared_last].ref_count == 2
    child.append_token(42)
    copy = bm.append_slot(child)
    assert copy is not None and copy[0] == shared_last
    assert child.block_table[-1] == copy[1] != shared_last
    assert child.block_table[0] == parent.block_table[0]  # full blocks stay shared
    assert bm.blocks[shared_last].ref_count == 1
    parent.append_token(7)
    assert bm.append_slot(parent) is None  # its block is private again: no copy


def _scheduler(num_blocks=32, **cfg) -> Scheduler:
    return Scheduler(SchedulerConfig(**cfg), BlockManager(num_blocks, BS), eos_token_ids=(0,))


def _step(sched: Scheduler, token=5):
    batch = sched.schedule()
    finished = sched.postprocess(batch, [None if s.params.max_tokens == 0 else token for s in batch.seqs])
    return batch, finished


def test_prefill_and_decode_share_a_step():
    sched = _scheduler()
    first = seq(range(10), max_tokens=3)
    sched.add(first)
    _step(sched)
    second = seq(range(20, 30), max_tokens=3)
    sched.add(second)
    batch, _ = _step(sched)
    assert batch.prefills == [second] and batch.decodes == [first]


def test_requests_sharing_a_prefix_in_one_step_wait_to_reuse_it():
    sched = _scheduler()
    a, b = seq(list(range(12)) + [1], max_tokens=1), seq(list(range(12)) + [2], max_tokens=1)
    sched.add(a)
    sched.add(b)
    batch, _ = _step(sched)
    assert batch.prefills == [a]  # b's first block is being computed by a
    batch, _ = _step(sched)
    assert batch.prefills == [b] and b.num_cached_tokens == 12


def test_out_of_blocks_preempts_the_newest_request_and_resumes_it():
    sched = _scheduler(num_blocks=4)
    old, new = seq(range(7), max_tokens=6, ignore_eos=True), seq(range(50, 57), max_tokens=6, ignore_eos=True)
    sched.add(old)
    sched.add(new)
    finished = []
    for _ in range(30):
        finished += _step(sched)[1]
        if not sched.has_unfinished:
            break
    assert sched.num_preemptions >= 1
    assert {s.seq_id for s in finished} == {old.seq_id, new.seq_id}
    assert all(s.num_completion_tokens == 6 for s in finished)
    assert sched.block_manager.num_free_blocks == 4


def test_stop_token_and_length_finish_reasons():
    sched = _scheduler()
    stops, runs_out = seq(range(5), max_tokens=10), seq(range(9, 14), max_tokens=2)
    sched.add(stops)
    sched.add(runs_out)
    batch = sched.schedule()
    sched.postprocess(batch, [0, 7])
    assert stops.finish_reason == "stop" and stops.completion_token_ids == [0]
    batch = sched.schedule()
    sched.postprocess(batch, [7])
    assert runs_out.finish_reason == "length" and runs_out.num_completion_tokens == 2


def test_new_blocks_follow_the_last_one_when_it_is_free_and_holds_nothing():
    """A sequence's blocks stay one run of slots where they can (decode attends to a run in one call):
    a returning prompt that hits cached blocks 4..5 gets block 6 after them, not the front of the free
    queue; a neighbour that still holds a cached prefix is not taken (nothing is evicted for it)."""
    bm = BlockManager(12, BS)
    bm.deallocate(run_prefill(bm, seq(range(100, 116))))  # blocks 0..3: 4 full, cached, then freed
    first = run_prefill(bm, seq(range(9)))  # two full blocks + 1 token: 4, 5, 6 (front is 7.. after)
    assert first.block_table == [4, 5, 6]
    bm.deallocate(first)
    again = seq(list(range(9)) + [50, 51, 52, 53])  # hits 4, 5; needs two more blocks
    assert bm.allocate(again) and again.num_cached_tokens == 8
    assert again.block_table == [4, 5, 6, 7]  # 6 held only a partial block: free and uncached
    assert bm.stats.evictions == 0
    bm = BlockManager(6, BS)
    a = run_prefill(bm, seq(range(8)))  # blocks 0, 1
    b = run_prefill(bm, seq(list(range(100, 104)) + [1]))  # blocks 2 (full, cached), 3
    assert (a.block_table, b.block_table) == ([0, 1], [2, 3])
    bm.deallocate(b)
    bm.deallocate(a)
    c = seq(list(range(8)) + [9] * 5)  # hits 0, 1; block 2 next to them still holds b's prefix
    assert bm.allocate(c) and c.block_table == [0, 1, 4, 5] and bm.stats.evictions == 0
    assert bm.lookup(seq(list(range(100, 104)) + [7]))[0] == 4  # b's prefix is still a hit


def test_a_recomputed_last_prompt_block_goes_back_where_it_was():
    """A prompt of whole blocks reuses all but its last block (its last token is always computed); that block
    is recomputed into the free block that already held it, so the sequence stays one run and the prefix
    stays cached (republished once written), with nothing evicted."""
    bm = BlockManager(8, BS)
    bm.deallocate(run_prefill(bm, seq(range(8))))  # blocks 0, 1 cached
    again = run_prefill(bm, seq(range(8)))
    assert again.block_table == [0, 1] and again.num_cached_tokens == 4 and bm.stats.evictions == 0
    bm.deallocate(again)
    assert bm.lookup(seq(range(9)))[0] == 8  # both blocks are hits again
