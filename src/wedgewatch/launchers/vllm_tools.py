"""Model work done inside vLLM's own environment, run there as a script by path.

``<vLLM env>/bin/python vllm_tools.py COMMAND ...``; it imports only what that environment has
(torch, transformers, gguf, peft, safetensors) and nothing of wedgewatch, whose own environment
has none of them (docs/real-servers.md, "vLLM here"). Commands:

- ``model GGUF OUT``: the bundled GGUF dequantized once (bf16) into a safetensors folder vLLM can
  load (vLLM no longer reads GGUF itself, and the GGUF plugin's dequant kernels need CUDA);
- ``lora BASE OUT``: a small LoRA adapter on BASE (peft, rank 8, seeded), its B matrices set
  non-zero (peft starts them at zero, and such an adapter changes nothing);
- ``score BASE [--adapter DIR] --prompt-ids JSON --ids JSON``: how transformers (with peft for an
  adapter) scores the given continuation of the prompt, teacher-forced, as JSON on stdout: per
  token its log probability, and the model's own top token and its log probability. A test holds
  vLLM's greedy ids and log probabilities to it; comparing greedy ids alone flakes, since two bf16
  implementations may break a near-tie differently and the texts then part for good.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

# The tied embedding is saved once, under the embedding's own name: a folder holding only
# `lm_head.weight` loads in vLLM with a zero embedding (every logit equal, token 0 forever).
_TIED = "lm_head.weight"
_LORA_RANK = 8
_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
_LORA_SEED = 1234
_LORA_B_STD = 0.02


def _torch() -> Any:
    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    return torch


def prepare_model(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` into ``out``: config, bf16 safetensors, tokenizer, generation config."""
    torch = _torch()
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent),
        gguf_file=gguf.name,
        quantization_config=GgufConfig(dequantize=True),
        dtype=torch.bfloat16,
    )
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != _TIED}
    if "model.embed_tokens.weight" not in state:
        raise SystemExit("the GGUF model has no model.embed_tokens.weight")
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    model.config.tie_word_embeddings = True
    model.config.architectures = [type(model).__name__]
    # The GGUF carries a quantization config that would tell vLLM to expect GGUF blocks.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.save_pretrained(str(out))
    model.generation_config.save_pretrained(str(out))
    # Gemma expects <bos> first; the tokenizer read from the GGUF adds none by itself.
    tokenizer.add_bos_token = True
    tokenizer.save_pretrained(str(out))


def make_lora(base: Path, out: Path) -> None:
    """A rank-8 adapter on every attention projection, with seeded non-zero B matrices."""
    torch = _torch()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.bfloat16)
    config = LoraConfig(r=_LORA_RANK, lora_alpha=2 * _LORA_RANK, target_modules=_LORA_TARGETS)
    # peft draws the A matrices from torch's global generator: seeded, every run has one adapter.
    torch.manual_seed(_LORA_SEED)
    peft_model = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(_LORA_SEED)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                noise = torch.randn(param.shape, generator=generator) * _LORA_B_STD
                param.copy_(noise.to(param.dtype))
    peft_model.save_pretrained(str(out))


def score(
    base: Path, adapter: Path | None, prompt_ids: list[int], ids: list[int]
) -> list[dict[str, float | int]]:
    """Each of ``ids`` scored after ``prompt_ids`` and the ids before it, in one forward pass."""
    torch = _torch()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.bfloat16)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter))
    model.eval()
    tokens = torch.tensor([prompt_ids + ids])
    with torch.no_grad():
        logits = model(tokens, attention_mask=torch.ones_like(tokens)).logits[0]
    # The logits at position p predict the token at p + 1.
    start = len(prompt_ids) - 1
    logprobs = torch.log_softmax(logits[start : start + len(ids)].float(), dim=-1)
    top = logprobs.max(dim=-1)
    return [
        {
            "logprob": float(logprobs[i, token]),
            "top": int(top.indices[i]),
            "top_logprob": float(top.values[i]),
        }
        for i, token in enumerate(ids)
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="vllm_tools.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("model")
    m.add_argument("gguf", type=Path)
    m.add_argument("out", type=Path)
    lo = sub.add_parser("lora")
    lo.add_argument("base", type=Path)
    lo.add_argument("out", type=Path)
    g = sub.add_parser("score")
    g.add_argument("base", type=Path)
    g.add_argument("--adapter", type=Path)
    g.add_argument("--prompt-ids", required=True)
    g.add_argument("--ids", required=True)
    args = p.parse_args(argv)
    if args.command == "model":
        prepare_model(args.gguf, args.out)
    elif args.command == "lora":
        make_lora(args.base, args.out)
    else:
        scores = score(args.base, args.adapter, json.loads(args.prompt_ids), json.loads(args.ids))
        sys.stdout.write(json.dumps(scores) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
