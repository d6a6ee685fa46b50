"""A loopback test server: real weights and tokenizer, vLLM's wire format.

    PYTHONPATH=trainer/tests python -m wire_server CHECKPOINT --host 127.0.0.1 --port N \\
        --served-model-name NAME [--ignore-token-fields]

A test server, kept with the tests (trainer/tests) rather than in the
embedded trainer package: it trains nothing, so it is not part of the
files whose digest feeds the grpo stage's fingerprint (trainer.Digest).
It needs torch and transformers only, no spade_trainer module.

It loads one model with transformers from a checkpoint directory (a Hugging
Face checkpoint, or one this trainer wrote, the tiny model's included) and
answers the two calls spade's openai backend makes, in vLLM's format
(OpenAI's chat completions plus vLLM's token fields; vLLM 0.11 docs,
"OpenAI-Compatible Server"):

* ``GET /v1/models``: ``{"object": "list", "data": [{"id": NAME, ...}]}``.
* ``POST /v1/chat/completions`` with ``messages``, ``tools``,
  ``temperature`` (default 1), ``top_p`` (default 1), ``max_tokens``
  (default 512), ``seed`` (default 0), ``n`` (1 only), ``stop`` (a string
  or a list), ``logprobs``/``top_logprobs``, ``return_token_ids`` and
  ``return_tokens_as_token_ids``. The messages are rendered with the
  checkpoint's chat template (``tools=`` the declarations; an assistant
  tool call's JSON arguments parsed to an object, as vLLM does) and
  tokenized without added special tokens; the completion is sampled one
  token at a time with a KV cache, by a torch.Generator seeded with the
  request's seed, so the same request gives the same answer. Sampling
  stops at an end token (the generation config's eos_token_id and the
  tokenizer's eos), at ``max_tokens``, or when the decoded text holds a
  ``stop`` string (cut before it).

The answer: ``choices[0].message`` ``{role, content, tool_calls}`` where
tool_calls are the Hermes ``<tool_call>{"name": ..., "arguments": ...}
</tool_call>`` blocks of the text when the request declared tools (content
is then the text before the first block, or null), else null;
``finish_reason`` "stop" (end token or stop string), "length"
(max_tokens), or "tool_calls" when tool calls were parsed (as vLLM);
``choices[0].token_ids`` (the sampled ids, the end token included) and the
top-level ``prompt_token_ids`` when ``return_token_ids`` is true;
``choices[0].logprobs.content[]`` ``{token, logprob, bytes,
top_logprobs}`` when ``logprobs`` is true, logprob being the log_softmax
of the raw logits (before temperature and top_p, which is what vLLM
reports by default); ``usage``; ``model`` = NAME. With
``--ignore-token-fields`` a request holding ``return_token_ids`` or
``return_tokens_as_token_ids`` is answered 422 ``{"detail": "Unexpected
fields in the request: {...}"}``, as ``transformers serve`` answers it,
so a client's fallback to text can be tested.

This is a test server: the weights and tokenizer are real and the wire
format follows vLLM, but it serves one request at a time in float32 on
the CPU (or the one device it is given), with no batching, no streaming
and no authentication. It is not a production server.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

import torch

TOKEN_FIELDS = ("return_token_ids", "return_tokens_as_token_ids")
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


class RequestError(Exception):
    def __init__(self, status: int, body: dict) -> None:
        super().__init__(json.dumps(body))
        self.status = status
        self.body = body


def _bad(message: str, status: int = 400, param: Optional[str] = None) -> RequestError:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "BadRequestError")
    return RequestError(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})


def _text(content: Any) -> Optional[str]:
    """A message content: a string, null, or OpenAI's list of text parts."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    raise _bad(f"message content {content!r}: want a string, null or a list of text parts")


def template_messages(messages: Any) -> List[dict]:
    """Request messages as the chat template takes them (vLLM's rendering:
    text contents; tool-call arguments parsed from their JSON text)."""
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: want a non-empty list", param="messages")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad("messages: every message needs a role", param="messages")
        t = dict(m)
        t["content"] = _text(m.get("content"))
        if t["content"] is None:
            t["content"] = ""
        calls = []
        for c in m.get("tool_calls") or []:
            fn = dict(c.get("function") or {})
            # As vLLM's chat_utils: empty arguments are {}, others parsed.
            if not fn.get("arguments"):
                fn["arguments"] = {}
            elif not isinstance(fn["arguments"], dict):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError as e:
                    raise _bad(f"tool call arguments are not JSON: {e}", param="messages") from None
            calls.append(dict(c, function=fn))
        if calls:
            t["tool_calls"] = calls
        else:
            t.pop("tool_calls", None)
        out.append(t)
    return out


def parse_tool_calls(text: str, seed_key: str) -> Tuple[Optional[str], List[dict]]:
    """Hermes tool calls (vLLM's hermes parser): the JSON objects inside
    <tool_call>...</tool_call> blocks. Returns (content, calls); calls are
    [] and content the whole text when there is none or one does not
    parse. Call ids are derived from the request, so repeatable."""
    if "<tool_call>" not in text:
        return text, []
    calls = []
    for k, mo in enumerate(TOOL_CALL_RE.finditer(text)):
        body = (mo.group(1) if mo.group(1) is not None else mo.group(2)).strip()
        try:
            obj = json.loads(body)
        except ValueError:
            return text, []
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            return text, []
        args = obj.get("arguments", obj.get("parameters", {}))
        cid = "chatcmpl-tool-" + hashlib.sha256(f"{seed_key}:{k}".encode()).hexdigest()[:24]
        calls.append({"id": cid, "type": "function", "function": {"name": obj["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
    content = text[: text.find("<tool_call>")]
    return (content if content else None), calls


class Engine:
    """One model and its tokenizer; ``complete`` answers a chat request."""

    def __init__(self, checkpoint: str, name: str, ignore_token_fields: bool = False, device: str = "cpu", model=None) -> None:
        """``model``: an already loaded model of the checkpoint's shape to
        serve instead of loading its weights (tests share one)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name
        self.ignore_token_fields = ignore_token_fields
        self.device = torch.device(device)
        self.tok = AutoTokenizer.from_pretrained(checkpoint)
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
        self.model = model.to(self.device).eval()
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        ends = set(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        if self.tok.eos_token_id is not None:
            ends.add(self.tok.eos_token_id)
        self.end_ids = ends
        self.lock = threading.Lock()
        self.created = int(time.time())

    def models(self) -> dict:
        return {"object": "list", "data": [{"id": self.name, "object": "model", "created": self.created, "owned_by": "spade-wire-server", "root": self.name}]}

    def render(self, messages: List[dict], tools: Optional[list]) -> List[int]:
        kw = {"tools": tools} if tools else {}
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw)
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def token_text(self, tid: int, as_ids: bool) -> str:
        return f"token_id:{tid}" if as_ids else self.tok.decode([tid])

    def complete(self, req: Any) -> Tuple[int, dict]:
        """(HTTP status, JSON body) for a /v1/chat/completions request."""
        try:
            with self.lock:
                return 200, self._complete(req)
        except RequestError as e:
            return e.status, e.body
        except (TypeError, ValueError, KeyError, AttributeError) as e:  # a malformed field
            return 400, {"error": {"message": f"bad request: {type(e).__name__}: {e}", "type": "BadRequestError", "param": None, "code": 400}}

    def _complete(self, req: Any) -> dict:
        if not isinstance(req, dict):
            raise _bad("want a JSON object")
        if self.ignore_token_fields:
            unexpected = {k for k in TOKEN_FIELDS if k in req}
            if unexpected:
                raise RequestError(422, {"detail": f"Unexpected fields in the request: {unexpected}"})
        if req.get("model") not in (None, self.name):
            raise _bad(f"The model `{req.get('model')}` does not exist.", 404, "model")
        if req.get("n", 1) != 1:
            raise _bad("n: this test server samples one choice (n = 1)", param="n")
        if req.get("stream"):
            raise _bad("stream: not supported by this test server", param="stream")
        tools = req.get("tools") or None
        messages = template_messages(req.get("messages"))
        temperature = float(req.get("temperature") if req.get("temperature") is not None else 1.0)
        top_p = float(req.get("top_p") if req.get("top_p") is not None else 1.0)
        max_tokens = req.get("max_completion_tokens", req.get("max_tokens"))
        if max_tokens is None:
            max_tokens = 512
        seed = int(req.get("seed") if req.get("seed") is not None else 0)
        stop = req.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        want_lp = bool(req.get("logprobs"))
        top_n = int(req.get("top_logprobs") or 0)
        as_ids = bool(req.get("return_tokens_as_token_ids"))
        if not (temperature >= 0 and 0 < top_p <= 1 and isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens >= 1):
            raise _bad("temperature >= 0, 0 < top_p <= 1 and max_tokens >= 1 are required")
        try:
            prompt = self.render(messages, tools)
        except Exception as e:  # a template error (jinja raise_exception)
            raise _bad(f"chat template: {type(e).__name__}: {e}") from None
        ids, lps, tops, finish = self._sample(prompt, temperature, top_p, max_tokens, seed, stop, top_n)
        body_ids = [t for t in ids if t not in self.end_ids]
        text = self.tok.decode(body_ids, skip_special_tokens=True)
        if finish == "stop" and stop:
            cut = min((text.find(s) for s in stop if s in text), default=-1)
            if cut >= 0:
                text = text[:cut]
        key = hashlib.sha256(json.dumps(req, sort_keys=True).encode()).hexdigest()
        content: Optional[str] = text
        calls: List[dict] = []
        if tools:
            content, calls = parse_tool_calls(text, key)
        message = {"role": "assistant", "content": content, "tool_calls": calls or None, "reasoning_content": None}
        choice: Dict[str, Any] = {"index": 0, "message": message, "logprobs": None,
                                  "finish_reason": "tool_calls" if calls else finish, "stop_reason": None}
        if want_lp:
            entries = []
            for k, (tid, lp) in enumerate(zip(ids, lps)):
                s = self.token_text(tid, as_ids)
                top = [{"token": self.token_text(t, as_ids), "logprob": v, "bytes": list(self.token_text(t, as_ids).encode("utf-8"))} for t, v in tops[k]]
                entries.append({"token": s, "logprob": lp, "bytes": list(s.encode("utf-8")), "top_logprobs": top})
            choice["logprobs"] = {"content": entries}
        out: Dict[str, Any] = {
            "id": "chatcmpl-" + key[:32],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [choice],
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)},
            "prompt_logprobs": None,
        }
        if req.get("return_token_ids"):
            choice["token_ids"] = list(ids)
            out["prompt_token_ids"] = list(prompt)
        return out

    @torch.no_grad()
    def _sample(self, prompt: List[int], temperature: float, top_p: float, max_tokens: int, seed: int, stop: List[str], top_n: int):
        g = torch.Generator(device=self.device).manual_seed(seed)
        ids: List[int] = []
        lps: List[float] = []
        tops: List[List[Tuple[int, float]]] = []
        past = None
        inp = torch.tensor([prompt], device=self.device)
        finish = "length"
        for _ in range(max_tokens):
            out = self.model(input_ids=inp, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            if temperature == 0:
                t = int(torch.argmax(logits))
            else:
                probs = torch.softmax(logits / temperature, dim=-1)
                if top_p < 1:
                    sp, si = torch.sort(probs, descending=True)
                    keep = torch.cumsum(sp, 0) - sp < top_p
                    keep[0] = True
                    filt = torch.zeros_like(probs)
                    filt[si[keep]] = sp[keep]
                    probs = filt / filt.sum()
                t = int(torch.multinomial(probs, 1, generator=g))
            ids.append(t)
            lps.append(float(logp[t]))
            if top_n > 0:
                v, i = torch.topk(logp, min(top_n, logp.numel()))
                tops.append([(int(a), float(b)) for a, b in zip(i, v)])
            else:
                tops.append([])
            if t in self.end_ids:
                finish = "stop"
                break
            if stop:
                text = self.tok.decode([x for x in ids if x not in self.end_ids], skip_special_tokens=True)
                if any(s in text for s in stop):
                    finish = "stop"
                    break
            inp = torch.tensor([[t]], device=self.device)
        return ids, lps, tops, finish


def make_handler(engine: Engine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: tests read stdout
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, engine.models())
            elif self.path.rstrip("/") in ("/health", "/v1/health"):
                self._send(200, {})
            else:
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "NotFoundError", "param": None, "code": 404}})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "NotFoundError", "param": None, "code": 404}})
                return
            try:
                req = json.loads(raw.decode("utf-8"))
            except ValueError as e:
                self._send(400, {"error": {"message": f"request body is not JSON: {e}", "type": "BadRequestError", "param": None, "code": 400}})
                return
            self._send(*engine.complete(req))

    return Handler


def make_server(engine: Engine, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server for engine, bound (port 0: a free port, server.server_port)."""
    srv = ThreadingHTTPServer((host, port), make_handler(engine))
    srv.daemon_threads = True
    return srv


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="wire_server", description="Loopback test server: a real checkpoint behind vLLM's chat-completions wire format.")
    p.add_argument("checkpoint", help="checkpoint directory (transformers)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument("--served-model-name", required=True)
    p.add_argument("--ignore-token-fields", action="store_true", help="answer 422 to return_token_ids, as transformers serve does")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    engine = Engine(args.checkpoint, args.served_model_name, args.ignore_token_fields, args.device)
    srv = make_server(engine, args.host, args.port)
    print(f"listening on http://{args.host}:{srv.server_port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
