"""A tiny causal language model trained here on seed 002 §4's retrieval questions, for `depthlab llm-bench` offline.

Not an LLM: a 4-layer GPT-2 of width 128 with a word-level tokenizer built from the prompts' own words, trained
from random weights to put the answer right after the question (the loss is on the answer token only: the
seed's non-IC formulation, §7). The questions are drawn with --seed 1 and up, so `llm-bench --seed 0` asks
others (at D = 1 the equations formulation has few distinct questions, so some may repeat). Nothing is
downloaded; it needs `pip install 'depthlab[llm]'` (transformers, tokenizers).

    python examples/llm_tiny_model.py --out tiny-retrieval-lm --steps 3000
    depthlab llm-bench --model tiny-retrieval-lm --depth 1-5 -n 100 --max-new-tokens 1 --device cpu
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from depthlab.llm.prompts import FORMULATIONS, Prompt, generate_many, has_depth

SPECIALS = ["[PAD]", "[UNK]", "[EOS]"]


def cells(depths: list[int]) -> list[tuple[str, int | None]]:
    """Every (formulation, depth) llm-bench asks with --depth over ``depths``."""
    return [(f, d) for f in FORMULATIONS for d in (depths if has_depth(f) else [None])]


def questions(depths: list[int], per_cell: int, seed: int) -> list[Prompt]:
    return [p for f, d in cells(depths) for p in generate_many(f, per_cell, seed=seed, depth=d)]


def tokenizer_for(texts: list[str]) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=SPECIALS))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")


def encode(tok: PreTrainedTokenizerFast, batch: list[Prompt]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``prompt + "\\n" + answer`` (what HFRunner feeds, then the answer), the mask and the index of
    the position that predicts the answer."""
    rows = [tok(p.prompt + "\n")["input_ids"] + tok(p.correct)["input_ids"] for p in batch]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask, torch.tensor([len(row) - 2 for row in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--depths", default="1,2,3,4,5")
    parser.add_argument("--seed", type=int, default=1, help="questions of seeds SEED, SEED+1, … (llm-bench: 0)")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    torch.manual_seed(args.seed)
    tok = tokenizer_for([p.prompt + " " + p.correct for p in questions(depths, 200, args.seed)])
    eos = tok.convert_tokens_to_ids("[EOS]")
    config = GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=args.width, n_layer=args.layers, n_head=4,
                        bos_token_id=eos, eos_token_id=eos, pad_token_id=tok.pad_token_id)
    model = GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    warm = max(1, args.steps // 20)  # linear warm-up, then linear decay to 10 %
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, 1 - 0.9 * max(0, s - warm) / max(1, args.steps - warm)))
    pool: list[Prompt] = []
    started, seen, right = time.perf_counter(), 0, 0
    for step in range(1, args.steps + 1):
        if len(pool) < args.batch_size:  # fresh questions: a new seed per refill
            pool = questions(depths, 64, args.seed + step)
            pool = [pool[i] for i in torch.randperm(len(pool)).tolist()]
        batch, pool = pool[: args.batch_size], pool[args.batch_size :]
        ids, mask, at = encode(tok, batch)
        logits = model(input_ids=ids, attention_mask=mask).logits[torch.arange(len(batch)), at]
        answer = ids[torch.arange(len(batch)), at + 1]
        loss = torch.nn.functional.cross_entropy(logits, answer)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        seen, right = seen + len(batch), right + int((logits.argmax(-1) == answer).sum())
        if step % 100 == 0 or step == args.steps:
            print(f"step {step}: loss {loss.item():.3f}, train accuracy {right / seen:.3f} "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)
            seen = right = 0
    model.save_pretrained(args.out)
    tok.save_pretrained(args.out)
    print(f"saved {args.out} ({sum(p.numel() for p in model.parameters()):,} parameters)")


if __name__ == "__main__":
    main()
