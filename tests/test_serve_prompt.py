"""The served prompt: per-block token counts, prefix stability, tool rendering; streamed text and stops."""
from __future__ import annotations

from conftest import anthropic_body, openai_chat_body
from kvprobe.request import render_request
from kvprobe.serve.prompt import build_prompt
from kvprobe.serve.text import TextStream
from localengine.tokenizer import Tokenizer

TOKENIZER = Tokenizer.byte_level()


def test_block_counts_cover_the_prompt_and_tools_are_in_it():
    prompt = build_prompt(render_request(anthropic_body(), "anthropic"), TOKENIZER)
    assert sum(prompt.block_tokens) + prompt.tail_tokens == prompt.num_tokens
    assert [b.tokens for b in prompt.request.blocks] == prompt.block_tokens
    text = TOKENIZER.decode(prompt.token_ids, skip_special_tokens=False)
    assert '<tool>{"name":"read_file"' in text and "<tool_call>" in text and "<tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_a_later_change_leaves_earlier_tokens_alone():
    a = build_prompt(render_request(anthropic_body(), "anthropic"), TOKENIZER)
    body = anthropic_body()
    body["messages"][-1]["content"][0]["content"] = "def login(): return True"
    b = build_prompt(render_request(body, "anthropic"), TOKENIZER)
    head = sum(a.block_tokens[:-1])
    assert a.token_ids[:head] == b.token_ids[:head] and a.token_ids != b.token_ids


def test_openai_tools_and_system_lead_the_prompt():
    prompt = build_prompt(render_request(openai_chat_body(), "openai"), TOKENIZER)
    text = TOKENIZER.decode(prompt.token_ids, skip_special_tokens=False)
    assert text.index("<tool>") < text.index("You are a careful coding agent") < text.index("What is in this image")
    assert text.count("<|im_start|>system") == 1 and "<|im_start|>tool" in text


def test_text_stream_holds_back_partial_stops_and_characters():
    stream = TextStream(TOKENIZER, ["END"])
    ids = TOKENIZER.encode("héllo EN")
    sent = "".join(stream.feed([i]) for i in ids)
    assert sent == "héllo "  # "EN" may begin a stop sequence; no half of "é" was ever sent
    assert stream.feed(TOKENIZER.encode("D and more")) == "" and stream.stop_sequence == "END"
    assert stream.final_text == "héllo "
    plain = TextStream(TOKENIZER)
    assert "".join(plain.feed([i]) for i in TOKENIZER.encode("héllo")) + plain.flush() == "héllo"
