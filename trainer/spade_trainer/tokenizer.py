"""Tokenisation of chat samples into ids and per-token training masks.

Every checkpoint's text goes through :class:`HFChatEncoder`, which wraps a
transformers tokenizer and its ``apply_chat_template``: ``encode_chat(messages,
train) -> (ids, mask)`` where ``train`` says which message indices are the
role's own output and ``mask[t]`` is 1 when token t is a training target. A
trained message's span is found by rendering the conversation up to it
(with the generation prompt) and through it.

The tiny model's tokenizer (:func:`tiny_tokenizer`) is a byte-level BPE
that Hugging Face tokenizers trained (scripts/train_tiny_tokenizer.py),
shipped as ``tiny_tokenizer.json`` beside this module, with a ChatML chat
template: ``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message.
:func:`byte_tokenizer` is the byte-per-token tokenizer it had before (ids
0..255 the UTF-8 bytes, then <|endoftext|>, <|im_start|>, <|im_end|>),
kept for old checkpoints' ids, tests and the byte-level benchmark. Neither
is hand-written: both are tokenizers objects.

Special-token text inside a message's content is encoded as ordinary
text, never as the special id, so LLM- or environment-written text cannot
forge turn boundaries.

For a trained message the targets are its content tokens and the closing
<|im_end|> (the model must learn to stop), not the role header and not the
newline after <|im_end|>, which the chat template adds and the model never
generates.

Tool calls (:func:`template_messages`): an assistant message's
``tool_calls`` and the ``tool`` messages are rendered by the chat template
with ``tools=`` the sample's declarations when the template renders tool
calls (Qwen's ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``);
when it does not (the rendering with the calls equals the one without,
as for ChatML, the tiny model's and SmolLM2's templates), the calls
are appended to the content as spade's JSON list, the text the Go side
sent before issue 25. ``context_ids`` renders a conversation with the
generation prompt: the prompt a trained turn was sampled from when the
batch row has no ``prompt_token_ids`` (grpo.encode_batch).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from typing import Dict, List, Optional, Sequence, Tuple

ENDOFTEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
# The end of a reasoning block (Qwen3, DeepSeek-R1 and the models trained
# after them; spade's grpo stage renders reasoning the same way).
THINK_CLOSE = "</think>"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# The tiny model's tokenizer file (tokenizers' JSON), shipped with the package.
TINY_TOKENIZER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tiny_tokenizer.json")
# model_max_length of the tiny tokenizers (the tiny model's max_position_embeddings).
TINY_MAX_LENGTH = 16384

# Go's unicode.IsSpace, which strings.TrimSpace uses: Python's str.isspace
# also counts the separators U+001C..U+001F.
_GO_NOT_SPACE = "\x1c\x1d\x1e\x1f"


def go_trim_space(text: str) -> str:
    """Go's strings.TrimSpace."""
    a, b = 0, len(text)
    while a < b and text[a].isspace() and text[a] not in _GO_NOT_SPACE:
        a += 1
    while b > a and text[b - 1].isspace() and text[b - 1] not in _GO_NOT_SPACE:
        b -= 1
    return text[a:b]


def spade_tool_calls_json(calls: Sequence[dict]) -> str:
    """The tool calls as the Go side wrote them into the content before
    issue 25: json.Marshal of []model.ToolCall, i.e. compact
    ``[{"id":...,"name":...,"arguments":"..."}]`` with Go's HTML-safe
    escapes of <, >, & and U+2028/U+2029."""
    out = json.dumps([{"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls],
                     ensure_ascii=False, separators=(",", ":"))
    for ch, esc in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        out = out.replace(ch, esc)
    return out


def _arguments(text: str):
    """A tool call's arguments for the template: the JSON object the text
    holds (templates such as Qwen2.5's apply ``tojson`` to it; vLLM hands
    templates the parsed object too, and {} for empty arguments), or the
    text itself when it is not a JSON object (Qwen3's template prints a
    string as it is)."""
    if not text.strip():
        return {}
    try:
        v = json.loads(text)
    except ValueError:
        return text
    return v if isinstance(v, dict) else text


def template_messages(messages: Sequence[dict], structured: bool) -> List[dict]:
    """The batch messages as apply_chat_template takes them: role and
    content; an assistant's tool_calls as OpenAI's structure with the
    arguments parsed (``structured``) or, when the template does not
    render tool calls, appended to the content as spade's JSON list
    (spade_tool_calls_json, after a newline, trimmed as Go's TrimSpace);
    a tool message's tool_call_id. The server's token fields are dropped."""
    out = []
    for m in messages:
        t = {"role": m["role"], "content": m["content"]}
        calls = m.get("tool_calls")
        if calls:
            if structured:
                t["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}}
                    for c in calls
                ]
            else:
                t["content"] = go_trim_space(m["content"] + "\n" + spade_tool_calls_json(calls))
        if "tool_call_id" in m:
            t["tool_call_id"] = m["tool_call_id"]
        out.append(t)
    return out


def prepare_messages(encoder, messages: Sequence[dict], tools) -> Tuple[List[dict], bool]:
    """(messages for the encoder, tool calls rendered as spade's JSON
    text?). Tool calls go to the template structured when the encoder's
    template renders them (encoder.renders_tool_calls), else as text."""
    if not any(m.get("tool_calls") for m in messages):
        return template_messages(messages, False), False
    structured = template_messages(messages, True)
    if encoder.renders_tool_calls(structured, tools):
        return structured, False
    return template_messages(messages, False), True


def _bytes_to_unicode() -> Dict[int, str]:
    """The byte -> printable-character map of byte-level BPE (GPT-2's
    scheme, which Hugging Face's ByteLevel pre-tokenizer uses): printable
    Latin-1 bytes map to themselves, the rest to code points from 256 on."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out = {}
    extra = 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def _chatml_fast(tokenizer_object):
    """A transformers fast tokenizer over a tokenizers.Tokenizer holding
    the ChatML specials: eos <|im_end|>, pad <|endoftext|>, no bos, the
    ChatML chat template (CHAT_TEMPLATE), model_max_length TINY_MAX_LENGTH."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_object, eos_token=IM_END, pad_token=ENDOFTEXT, model_max_length=TINY_MAX_LENGTH
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def tiny_tokenizer():
    """The tiny model's tokenizer (tiny:SEED): the byte-level BPE of
    TINY_TOKENIZER_FILE (vocabulary 4,096: the specials <|endoftext|> = 0,
    <|im_start|> = 1, <|im_end|> = 2, the 256 byte symbols and merges;
    trained by Hugging Face tokenizers on CPython's standard library,
    scripts/train_tiny_tokenizer.py) as a transformers fast tokenizer with
    the ChatML chat template. Raises OSError when the file is missing."""
    from tokenizers import Tokenizer

    return _chatml_fast(Tokenizer.from_file(TINY_TOKENIZER_FILE))


def byte_tokenizer():
    """A byte-level BPE with no merges, as a transformers fast tokenizer
    with the ChatML chat template: byte b is id b, then <|endoftext|> =
    256, <|im_start|> = 257, <|im_end|> = 258 (vocabulary 259). It is the
    tokenizer the tiny model had before issue 24's last change (every
    UTF-8 byte a token, samples ~2.3x longer than under tiny_tokenizer);
    checkpoints written then carry it as tokenizer.json and load through
    AutoTokenizer with the same ids. Tests use it where ids must be read
    off the bytes; the trainer benchmark uses it for the byte-level
    workload."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    b2u = _bytes_to_unicode()
    tok = Tokenizer(models.BPE(vocab={b2u[b]: b for b in range(256)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in (ENDOFTEXT, IM_START, IM_END)])
    return _chatml_fast(tok)


def _special_texts(tokenizer) -> List[str]:
    """The texts of a transformers tokenizer's special tokens: its named
    and additional specials (``all_special_tokens``) and every added token
    flagged ``special`` (``added_tokens_decoder``), such as ChatML's
    ``<|im_start|>``. Added tokens not flagged special (Qwen's
    ``<tool_call>``) are left out: the model writes them as ordinary
    output, and they decode into the text it returned."""
    out = set(getattr(tokenizer, "all_special_tokens", None) or [])
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(tok, "special", False):
            out.add(getattr(tok, "content", None) or str(tok))
    return sorted(t for t in out if t)


class HFChatEncoder:
    """Chat encoding with a transformers tokenizer (every checkpoint's,
    the tiny model's included).

    Special-token text inside a message's content (say an environment's
    observation or the model's own answer holding the characters
    ``<|im_end|>``) is encoded as ordinary text, never as the special
    id: otherwise text written by the model or an environment could forge
    a turn boundary, and a trained answer that contains the characters
    would teach the model to emit the real
    end-of-turn token in the middle of an answer. The chat template's own
    special tokens stay special. How: each special token's text in the
    contents is replaced by a placeholder before the template is rendered
    (so a template that rewrites contents still sees their shape), and in
    the rendered text each placeholder is tokenized with
    ``split_special_tokens=True`` and the rest as usual. Conversations with
    no special-token text in any content are tokenized exactly as before,
    in one call on the rendered text, as a serving engine tokenizes a chat
    prompt."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        pad = tokenizer.pad_token_id
        if pad is None:
            pad = tokenizer.eos_token_id
        self.pad_id = pad if pad is not None else 0
        self.specials = _special_texts(tokenizer)
        # Longest first, so a special that contains another is replaced whole.
        self._special_re = re.compile("|".join(re.escape(t) for t in sorted(self.specials, key=len, reverse=True))) if self.specials else None
        # The same alternation captured: re.split keeps the specials, at odd indices.
        self._split_re = re.compile(f"({self._special_re.pattern})") if self._special_re else None
        self._segments_exact: Optional[bool] = None  # _segments_match_one_call, computed once

    def _segments_match_one_call(self) -> bool:
        """Whether tokenizing a rendering piecewise, split at its special
        tokens, gives the ids of one call on it. True for byte-level BPEs
        (Qwen, Llama 3, GPT-2 style, the tiny model's): a tokenizer splits
        its added tokens out first and pre-tokenizes each section alone.
        False when a special strips the whitespace beside it
        (lstrip/rstrip) or the pre-tokenizer marks the start of each call
        (SentencePiece-style Metaspace, "▁" prepended): checked on the
        flags and on a probe conversation rendered by the template."""
        if self._segments_exact is None:
            self._segments_exact = False
            flagged = any(getattr(t, "lstrip", False) or getattr(t, "rstrip", False)
                          for t in (getattr(self.tok, "added_tokens_decoder", None) or {}).values())
            if not flagged and self._special_re is not None:
                try:
                    text = self._render([{"role": "user", "content": "Hi there."}, {"role": "assistant", "content": "ok, then"}], False, None)
                except Exception:  # a template that cannot render the probe: keep the piecewise rule
                    return False
                one = list(self.tok(text, add_special_tokens=False)["input_ids"])
                seg = [t for part in self._split_re.split(text) if part for t in self.tok(part, add_special_tokens=False)["input_ids"]]
                self._segments_exact = one == seg
        return self._segments_exact

    def _render(self, messages: Sequence[dict], gen: bool, tools) -> str:
        kw = {"tools": tools} if tools else {}
        return self.tok.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=gen, **kw)

    def renders_tool_calls(self, messages: Sequence[dict], tools=None) -> bool:
        """Whether the template renders the tool calls of ``messages``
        (template_messages structured): the rendering differs from the one
        without them."""
        bare = [{k: v for k, v in m.items() if k != "tool_calls"} for m in messages]
        return self._render(messages, False, tools) != self._render(bare, False, tools)

    def context_ids(self, messages: Sequence[dict], tools=None) -> List[int]:
        """messages rendered with the generation prompt and tokenized."""
        return self._ids(messages, True, tools)

    def _ids(self, messages: Sequence[dict], gen: bool, tools=None) -> List[int]:
        messages = list(messages)

        def has_special(v) -> bool:
            if isinstance(v, str):
                return bool(self._special_re.search(v))
            if isinstance(v, dict):
                return any(has_special(x) for x in v.values())
            if isinstance(v, list):
                return any(has_special(x) for x in v)
            return False

        def texts(m: dict) -> list:
            # Every model- or environment-written string the template may
            # print: the content, each tool call's arguments, name and id,
            # a tool result's tool_call_id.
            calls = m.get("tool_calls") or []
            return ([m.get("content"), m.get("tool_call_id")] + [c["function"]["arguments"] for c in calls]
                    + [c["function"].get("name") for c in calls] + [c.get("id") for c in calls])

        if self._special_re is None or not (any(has_special(texts(m)) for m in messages) or has_special(tools or [])):
            text = self._render(messages, gen, tools)
            return list(self.tok(text, add_special_tokens=False)["input_ids"])
        nonce = secrets.token_hex(8)
        while any(nonce in json.dumps(texts(m), ensure_ascii=False) for m in messages) or nonce in json.dumps(tools or [], ensure_ascii=False):
            nonce = secrets.token_hex(8)
        index = {t: k for k, t in enumerate(self.specials)}

        def defang(v):
            # Every string of a content, of a tool call's arguments (parsed
            # JSON: its strings; the template prints them with tojson,
            # which keeps non-ASCII characters as they are) and of the tool
            # declarations (an environment's description is LLM-written).
            if isinstance(v, str):
                return self._special_re.sub(lambda mo: f"\ue000{nonce}:{index[mo.group(0)]}\ue001", v)
            if isinstance(v, dict):
                return {defang(k): defang(x) for k, x in v.items()}
            if isinstance(v, list):
                return [defang(x) for x in v]
            return v

        masked = []
        for m in messages:
            m = dict(m)
            if isinstance(m.get("content"), str):
                m["content"] = defang(m["content"])
            if m.get("tool_calls"):
                calls = []
                for c in m["tool_calls"]:
                    # Only the keys present: an absent key stays absent (a
                    # template prints None as "None").
                    c, fn = dict(c), dict(c["function"])
                    for k in ("arguments", "name"):
                        if k in fn:
                            fn[k] = defang(fn[k])
                    if "id" in c:
                        c["id"] = defang(c["id"])
                    c["function"] = fn
                    calls.append(c)
                m["tool_calls"] = calls
            if isinstance(m.get("tool_call_id"), str):
                m["tool_call_id"] = defang(m["tool_call_id"])
            masked.append(m)
        text = self._render(masked, gen, defang(tools) if tools else tools)
        placeholder = re.compile(f"\ue000{nonce}:(\\d+)\ue001")
        ids: List[int] = []
        if not self._segments_match_one_call():
            # Pieces split at the contents' special texts, each text
            # tokenized alone as text: the template's specials stay inside
            # the pieces and keep their ids, and a piece's own start may
            # tokenize unlike one call (a SentencePiece "▁").
            for j, piece in enumerate(placeholder.split(text)):
                if j % 2 == 1:
                    ids += self._as_text(self.specials[int(piece)])
                elif piece:
                    ids += self.tok(piece, add_special_tokens=False)["input_ids"]
            return ids
        # Every special-token text left in the rendering is the template's
        # own: split there (a tokenizer splits its added tokens out of the
        # text before pre-tokenizing the rest, so this is where one call
        # splits too), and tokenize each segment between them with the
        # contents' special texts restored and split_special_tokens=True,
        # which keeps them text. A segment then tokenizes as in one call on
        # the rendering with those texts plain: a leading space still
        # merges with the text after it.
        for j, part in enumerate(self._split_re.split(text)):
            if j % 2 == 1:
                ids += self.tok(part, add_special_tokens=False)["input_ids"]
                continue
            restored = placeholder.sub(lambda mo: self.specials[int(mo.group(1))], part)
            if restored == part:
                if part:
                    ids += self.tok(part, add_special_tokens=False)["input_ids"]
                continue
            for k in sorted({int(x) for x in placeholder.findall(part)}):
                self._as_text(self.specials[k])  # refuses a tokenizer that ignores split_special_tokens
            ids += self.tok(restored, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        return ids

    def _as_text(self, special: str) -> List[int]:
        """The ids of a special token's text tokenized as ordinary text.
        Raises ValueError when the tokenizer ignores split_special_tokens
        (older transformers releases, some slow tokenizers) and returns the
        special id all the same: training on such a sample would let its
        text forge a turn boundary."""
        ids = list(self.tok(special, add_special_tokens=False, split_special_tokens=True)["input_ids"])
        plain = self.tok(special, add_special_tokens=False)["input_ids"]
        if len(plain) == 1 and plain[0] in ids:
            raise ValueError(
                f"tokenizer {type(self.tok).__name__} ignores split_special_tokens: the text {special!r} inside a message "
                "would be encoded as the special token itself; use a transformers release whose tokenizers honour "
                "split_special_tokens, or drop samples whose messages contain special-token text"
            )
        return ids

    def reasoning_end(self, ids: Sequence[int]) -> int:
        """How many leading tokens of an assistant turn's ids are its
        reasoning block: through the token that completes the first
        ``</think>`` of the decoded text, and the whitespace-only tokens
        right after it (Qwen3 writes ``<think>\n...\n</think>\n\n``
        before the answer); 0 when the text holds no ``</think>``.
        Everything before ``</think>`` counts, as vLLM's Qwen3 reasoning
        parser takes it, also when the block's ``<think>`` was in the
        prompt (templates that open it in the generation prompt). Found by
        decoding prefixes (a binary search), so it holds whether
        ``</think>`` is one added token (Qwen3) or several."""
        ids = list(ids)
        if not ids or THINK_CLOSE not in self.tok.decode(ids):
            return 0
        lo, hi = 1, len(ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if THINK_CLOSE in self.tok.decode(ids[:mid]):
                hi = mid
            else:
                lo = mid + 1
        while lo < len(ids) and self.tok.decode([ids[lo]]).strip() == "" and self.tok.decode([ids[lo]]) != "":
            lo += 1
        return lo

    def encode_chat(self, messages: Sequence[dict], train: Sequence[int], tools=None) -> Tuple[List[int], List[int]]:
        full = self._ids(messages, False, tools)
        mask = [0] * len(full)
        for i in train:
            ctx = self._ids(messages[:i], True, tools)
            through = self._ids(messages[: i + 1], False, tools)
            if full[: len(through)] != through:
                raise ValueError(
                    f"chat template is not prefix-stable at message {i} (e.g. it rewrites earlier turns); cannot locate the trained tokens"
                )
            # The turn starts where its rendering leaves the context's
            # tokens: at the context's end, or one token earlier when a
            # token spans the header's end and the turn's first characters
            # (a tokenizer that merges "\n" with the whitespace after it);
            # that token is trained rather than the turn's start dropped.
            start = 0
            while start < min(len(ctx), len(through)) and ctx[start] == through[start]:
                start += 1
            if start < len(ctx) - 1:
                raise ValueError(
                    f"chat template is not prefix-stable at message {i}: the rendering through it leaves the prompt's tokens at "
                    f"{start} of {len(ctx)}; cannot locate the trained tokens"
                )
            end = len(through)
            # Drop the template's trailing whitespace after the end-of-turn
            # token: the model never generates it.
            while end > start and self.tok.decode([through[end - 1]]).strip() == "":
                end -= 1
            for t in range(start, end):
                mask[t] = 1
        return full, mask
