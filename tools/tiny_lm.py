"""An offline stand-in for the FSDP job's model: a tiny GPT-NeoX with its own tokenizer.

    python -m tools.tiny_lm models/tiny-gpt-neox [--text corpus.txt]

The model has random weights and the same architecture family as dolly-v2-7b (GPT-NeoX), saved with
save_pretrained (safetensors) next to a BPE tokenizer trained on the generated corpus
(rayfleet/train/data/synthetic_text.py; --text also writes that corpus there), so the job loads it exactly
like a Hub model.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rayfleet.train.data.synthetic_text import corpus  # the generated corpus: the same text `make text-data` writes


def build(
    model_dir: Path,
    text: str,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    vocab: int = 512,
    max_positions: int = 512,
    seed: int = 0,
) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(text.splitlines(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    config = GPTNeoXConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=max_positions,
        eos_token_id=fast.eos_token_id,
        bos_token_id=fast.eos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = GPTNeoXForCausalLM(config)
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(model_dir)
    fast.save_pretrained(model_dir)
    return model_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--text", type=Path, help="also write the generated corpus here (SYNTHETIC)")
    args = parser.parse_args(argv)
    text = corpus()
    if args.text:
        args.text.parent.mkdir(parents=True, exist_ok=True)
        args.text.write_text(text)
        print(f"wrote the SYNTHETIC corpus to {args.text}")
    build(args.model_dir, text)
    print(f"wrote a tiny GPT-NeoX + tokenizer (random weights) to {args.model_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
