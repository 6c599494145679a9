"""The emulated model: a deterministic word-level tokenizer and output tokens that say they are emulated.

Nothing here is a real tokenizer or model. Prompt tokens are counted as words and punctuation marks plus one BOS
token (what a Llama tokenizer adds), a chat prompt goes through a fixed emulated template, and output token i (1-based)
is the text `emulated-token-<i> ` with id `OUTPUT_ID_BASE + i`. The model "emits EOS" after `output-tokens` tokens
unless the request sets ignore_eos or a smaller max_new_tokens.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, Final

OUTPUT_ID_BASE: Final = 100000
EOS_TOKEN_ID: Final = 128009
"""The id reported as `matched` in a stop finish reason (Llama 3.1's <|eot_id|>)."""
VOCAB_SIZE: Final = 128256
_WORD: Final = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[int]:
    """Deterministic ids for `text`: BOS (128000), then one id per word or punctuation mark."""
    ids = [128000]
    for word in _WORD.findall(text):
        digest = hashlib.blake2s(word.encode(), digest_size=4).digest()
        ids.append(int.from_bytes(digest, "big") % 100000)
    return ids


def chat_prompt(messages: Sequence[Any]) -> str:
    """An emulated chat template: one block per message, then the assistant header."""
    parts = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        parts.append(f"<|start|>{message.get('role', 'user')}\n{content or ''}<|end|>\n")
    return "".join(parts) + "<|start|>assistant\n"


def output_token(index: int) -> tuple[int, str]:
    """(id, text) of output token `index` (1-based)."""
    return OUTPUT_ID_BASE + index, f"emulated-token-{index} "
