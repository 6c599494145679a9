"""OpenAI-compatible request adaptation and response formatting, as SGLang's serving_completions / serving_chat do.

0.5.2: sglang/srt/entrypoints/openai/serving_completions.py and serving_chat.py, protocol.py:36-625.
0.5.23: the same files (protocol.py:87-1400), whose models drop some null fields when serialised (tool_calls,
hidden_states, sglext). Every response object and every SSE chunk also carries a top-level `emulator` object (who
served it; an emulator addition, see docs/serving-emulator.md). Only `n == 1` and a single prompt are emulated.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from e2e.serving.emulator import textgen
from e2e.serving.emulator.engine import Abort, GenRequest, new_rid

DEFAULT_MODEL_NAME = "default"  # protocol.py DEFAULT_MODEL_NAME (both releases)


class BadRequest(ValueError):
    """A request SGLang answers 400 with ErrorResponse (BadRequestError)."""


def _int_or_none(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name}: Input should be a valid integer")
    return value


def _routing(body: dict[str, Any], req: GenRequest) -> GenRequest:
    """The PD routing fields the router adds (CompletionRequest/ChatCompletionRequest bootstrap_*)."""
    req.bootstrap_host = body.get("bootstrap_host")
    req.bootstrap_port = _int_or_none(body.get("bootstrap_port"), "bootstrap_port")
    req.bootstrap_room = _int_or_none(body.get("bootstrap_room"), "bootstrap_room")
    return req


def completion_request(body: dict[str, Any]) -> GenRequest:
    prompt = body.get("prompt")
    if prompt is None:
        raise BadRequest("prompt: Field required")
    if int(body.get("n") or 1) != 1:
        raise BadRequest("emulator: n > 1 is not emulated")
    if isinstance(prompt, str):
        ids = textgen.tokenize(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(p, int) for p in prompt):
        ids = list(prompt)
    elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        ids = textgen.tokenize(prompt[0])
    else:
        raise BadRequest("emulator: batched prompts are not emulated")
    max_tokens = _int_or_none(body.get("max_tokens", 16), "max_tokens")
    if max_tokens is not None and max_tokens <= 0:
        raise BadRequest("max_tokens must be positive")  # protocol.py:232-236 (0.5.2)
    req = GenRequest(
        rid=str(body.get("rid") or new_rid()),
        input_ids=ids,
        max_new_tokens=max_tokens,
        ignore_eos=bool(body.get("ignore_eos", False)),
        stream=bool(body.get("stream", False)),
        return_logprob=body.get("logprobs") is not None,
    )
    return _routing(body, req)


def chat_request(body: dict[str, Any]) -> GenRequest:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadRequest("messages: Field required")
    if not messages:
        raise BadRequest("Messages cannot be empty.")  # serving_chat.py:68 (0.5.2)
    if int(body.get("n") or 1) != 1:
        raise BadRequest("emulator: n > 1 is not emulated")
    max_tokens = _int_or_none(body.get("max_tokens"), "max_tokens") or _int_or_none(
        body.get("max_completion_tokens"), "max_completion_tokens"
    )
    req = GenRequest(
        rid=str(body.get("rid") or new_rid()),
        input_ids=textgen.tokenize(textgen.chat_prompt(messages)),
        max_new_tokens=max_tokens,  # serving_chat.py:384 (0.5.2): max_tokens or max_completion_tokens, else None
        ignore_eos=bool(body.get("ignore_eos", False)),
        stream=bool(body.get("stream", False)),
        return_logprob=bool(body.get("logprobs", False)),
    )
    return _routing(body, req)


def _usage(version: str, meta: dict[str, Any]) -> dict[str, Any]:
    prompt, completion = int(meta["prompt_tokens"]), int(meta["completion_tokens"])
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
    }
    if version == "0.5.23":
        usage["completion_tokens_details"] = None
    return usage


def _finish(meta: dict[str, Any]) -> tuple[str | None, Any]:
    finish = meta.get("finish_reason")
    if not finish:
        return None, None
    return finish["type"], finish.get("matched")


def completion_response(version: str, model: str, out: dict[str, Any]) -> dict[str, Any]:
    """serving_completions._build_completion_response (0.5.2 serving_completions.py:337-400)."""
    meta = out["meta_info"]
    reason, matched = _finish(meta)
    return {
        "id": meta["id"],
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "text": out["text"], "logprobs": None, "finish_reason": reason, "matched_stop": matched}
        ],
        "usage": _usage(version, meta),
        "metadata": {"weight_version": meta.get("weight_version")},
        "emulator": meta["emulator"],
    }


def chat_response(version: str, model: str, out: dict[str, Any]) -> dict[str, Any]:
    """serving_chat._build_chat_response (0.5.2 serving_chat.py:700-790)."""
    meta = out["meta_info"]
    reason, matched = _finish(meta)
    message: dict[str, Any] = {"role": "assistant", "content": out["text"], "reasoning_content": None}
    if version == "0.5.2":
        message["tool_calls"] = None
    return {
        "id": meta["id"],
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
        ],
        "usage": _usage(version, meta),
        "metadata": {"weight_version": meta.get("weight_version")},
        "emulator": meta["emulator"],
    }


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


DONE = b"data: [DONE]\n\n"


def streaming_error(message: str, err_type: str, code: int) -> str:
    """serving_base.create_streaming_error_response (0.5.2 serving_base.py:150-166)."""
    return json.dumps({"error": {"object": "error", "message": message, "type": err_type, "param": None, "code": code}})


async def completion_stream(
    version: str, model: str, request: dict[str, Any], outputs: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[bytes]:
    """serving_completions._generate_completion_stream (0.5.2 serving_completions.py:170-300; 0.5.23 :230-420)."""
    created = int(time.time())
    sent = ""
    last: dict[str, Any] | None = None
    try:
        async for out in outputs:
            last = out
            meta = out["meta_info"]
            delta = out["text"][len(sent) :]
            sent += delta
            reason, matched = _finish(meta)
            chunk = {
                "id": meta["id"],
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "text": delta, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
                ],
                "usage": None,
                "emulator": meta["emulator"],
            }
            yield sse(chunk)
        if last is not None and (request.get("stream_options") or {}).get("include_usage"):
            meta = last["meta_info"]
            usage_chunk = {
                "id": meta["id"],
                "object": "text_completion",
                "created": created,
                "model": model,
                "choices": [],
                "usage": {k: v for k, v in _usage(version, meta).items() if v is not None},
                "emulator": meta["emulator"],
            }
            yield sse(usage_chunk)
    except Abort as exc:
        # 0.5.2 catches every exception here (serving_completions.py:300-302): an error chunk typed BadRequestError,
        # code 400. 0.5.23 turns an abort with a status into an error chunk with that status (:355-370).
        if version == "0.5.2":
            # str() of the HTTPException a 5xx abort raises is "<status>: <detail>"; a 400 abort is a ValueError.
            message = exc.message if exc.status_code == 400 else f"{exc.status_code}: {exc.message}"
            yield sse(streaming_error(message, "BadRequestError", 400))
        else:
            yield sse(streaming_error(exc.message, _status_name(exc.status_code), exc.status_code))
    yield DONE


async def chat_stream(
    version: str, model: str, request: dict[str, Any], outputs: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[bytes]:
    """serving_chat._generate_chat_stream (0.5.2 serving_chat.py:455-655; 0.5.23 :2440-2800). A 500 abort in 0.5.2
    escapes this generator (it only catches ValueError), so the HTTP layer breaks the stream (see server.py)."""
    sent = ""
    first = True
    last: dict[str, Any] | None = None
    finish_seen: dict[str, Any] | None = None

    def chunk(meta: dict[str, Any], delta: dict[str, Any], reason: str | None, matched: Any) -> dict[str, Any]:
        if version == "0.5.23" and delta.get("tool_calls") is None:
            delta = {k: v for k, v in delta.items() if k != "tool_calls"}
        return {
            "id": meta["id"],
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason, "matched_stop": matched}
            ],
            "usage": None,
            "emulator": meta["emulator"],
        }

    empty = {"role": None, "content": None, "reasoning_content": None, "tool_calls": None}
    try:
        async for out in outputs:
            last = out
            meta = out["meta_info"]
            if meta.get("finish_reason"):
                finish_seen = meta["finish_reason"]
            if first:
                first = False
                yield sse(chunk(meta, {**empty, "role": "assistant", "content": ""}, None, None))
            delta = out["text"][len(sent) :]
            sent += delta
            if delta:
                yield sse(chunk(meta, {**empty, "content": delta}, None, None))
        if last is not None and finish_seen is not None:
            meta = last["meta_info"]
            yield sse(chunk(meta, dict(empty), finish_seen["type"], finish_seen.get("matched")))
        if last is not None and (request.get("stream_options") or {}).get("include_usage"):
            meta = last["meta_info"]
            usage_chunk = chunk(meta, dict(empty), None, None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = _usage(version, meta)
            yield sse(usage_chunk)
    except Abort as exc:
        if version == "0.5.2" and exc.status_code != 400:
            raise
        if version == "0.5.2":
            yield sse(streaming_error(exc.message, "BadRequestError", 400))
        else:
            yield sse(streaming_error(exc.message, _status_name(exc.status_code), exc.status_code))
    yield DONE


def _status_name(code: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(code).name
    except ValueError:
        return str(code)


def error_response(message: str, err_type: str, code: int) -> dict[str, Any]:
    """ErrorResponse.model_dump() (protocol.py:59-64 in 0.5.2)."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def model_card(version: str, name: str, context_length: int) -> dict[str, Any]:
    card: dict[str, Any] = {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": name,
    }
    if version == "0.5.23":
        card["parent"] = None
    card["max_model_len"] = context_length
    return card
