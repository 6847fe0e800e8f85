"""Make a tiny random-weight Qwen2 and a byte-level BPE tokenizer, offline (run with vLLM's Python).

    python tests/vllm_tiny_model.py OUTDIR

vLLM's CPU attention needs head_dim >= 32: hidden 128 with 4 heads. Nothing is fetched from a hub.
"""

import os
import random
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM  # noqa: E402

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(7)
vocab = [
    "gpu",
    "memory",
    "leak",
    "cache",
    "block",
    "token",
    "prompt",
    "server",
    "queue",
    "sidecar",
    "watch",
    "alert",
    "page",
    "card",
    "budget",
]
texts = [" ".join(rng.choice(vocab) for _ in range(rng.randint(4, 24))) for _ in range(3000)]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
tok.train_from_iterator(
    texts,
    trainer=trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    ),
)
fast = PreTrainedTokenizerFast(
    tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>", model_max_length=1024
)
fast.save_pretrained(out)
eos = fast.convert_tokens_to_ids("<|endoftext|>")
torch.manual_seed(7)
cfg = Qwen2Config(
    vocab_size=len(fast),
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
    bos_token_id=eos,
    eos_token_id=eos,
    pad_token_id=eos,
)
Qwen2ForCausalLM(cfg).to(torch.float32).save_pretrained(out, safe_serialization=True)
print(out)
