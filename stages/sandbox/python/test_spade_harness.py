"""Unit tests for the harness's JSON framing (run by TestPythonUnitTests in Go)."""

import json
import math
import unittest

import spade_harness as h


class Dumps(unittest.TestCase):
    def reference(self, obj):
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    def test_same_text_as_json_dumps(self):
        values = [
            {"ok": True, "obs": "héllo 🌍\n\"quoted\"\t\\", "reward": 0.25, "n": -7, "none": None},
            {"info": {"nested": [1, 2.5, [], {}, {"k": [True, False]}]}, "big": 10**30, "tiny": 5e-324},
            ["\u2028\u2029", "\x00\x1f", "é" * 3],
            "plain",
            3.0,
        ]
        for v in values:
            self.assertEqual(h.dumps(v), self.reference(v))

    def test_lone_surrogate_passes_through_to_the_utf8_step(self):
        text = h.dumps({"obs": "\ud800"})
        self.assertEqual(text, self.reference({"obs": "\ud800"}))
        self.assertEqual(text.encode("utf-8", "surrogatepass"), b'{"obs":"\xed\xa0\x80"}')

    def test_refuses_nan_infinity_and_unknown_types(self):
        for bad in (math.nan, math.inf, -math.inf):
            with self.assertRaises(ValueError):
                h.dumps({"reward": bad})
        with self.assertRaises(TypeError):
            h.dumps({"x": object()})
        with self.assertRaises(TypeError):
            h.dumps({"x": {1, 2}})

    def test_cycle_is_an_error_not_a_hang(self):
        d = {}
        d["self"] = d
        with self.assertRaises((ValueError, RecursionError)):
            h.dumps(d)


class Loads(unittest.TestCase):
    def test_round_trip(self):
        v = {"op": "step", "action": "guess 7 ü", "seed": 12345678901234, "x": [1.5, None, True]}
        self.assertEqual(h.loads(json.dumps(v, separators=(",", ":")).encode()), v)

    def test_rejects_trailing_data_and_garbage(self):
        for bad in (b'{"op":"step"} ', b'{"op":"step"}{}', b"", b"nope", b'{"op":', b" {}"):
            with self.assertRaises(ValueError, msg=bad):
                h.loads(bad)
        with self.assertRaises(UnicodeDecodeError):
            h.loads(b'"\xff"')


class AcceptsKeywords(unittest.TestCase):
    """accepts_keywords says True only where inspect's bind accepts the call."""

    def cases(self):
        import functools

        def plain(a, b=1, *, c, d=2):
            pass

        def varkw(a, **kw):
            pass

        def varargs(*args, a=None):
            pass

        def posonly(a, /, b):
            pass

        def nothing():
            pass

        @functools.wraps(plain)
        def wrapped(*args, **kwargs):
            pass

        class Env:
            def tool_a(self, x, y=0):
                pass

            def tool_b(self, *, x):
                pass

            def tool_c(self, **kw):
                pass

            def tool_d(self, /, x):
                pass

            def tool_e():
                pass

            def tool_f(*args):
                pass

            def tool_g(self, x, /, y):
                pass

            @staticmethod
            def tool_h(x, y):
                pass

            @classmethod
            def tool_i(cls, x):
                pass

            tool_j = functools.partialmethod(tool_a, 1)
            tool_k = functools.partial(plain, 1)

            def __call__(self, x):
                pass

        e = Env()
        fns = [plain, varkw, varargs, posonly, nothing, wrapped, lambda x, y=2: 0, e, print]
        fns += [getattr(e, n) for n in dir(Env) if n.startswith("tool_")]
        names = [[], ["a"], ["b"], ["c"], ["a", "c"], ["a", "b", "c", "d"], ["a", "c", "z"], ["x"], ["y"], ["x", "y"],
                 ["self"], ["x", "self"], ["kw"], ["args"], ["cls", "x"], ["not-an-identifier"]]
        return fns, names

    def test_agrees_with_inspect(self):
        import inspect

        fns, names = self.cases()
        quick = 0
        for fn in fns:
            for ns in names:
                try:
                    inspect.signature(fn).bind(**{n: None for n in ns})
                    binds = True
                except (TypeError, ValueError):
                    binds = False
                got = h.accepts_keywords(fn, ns)
                if got:
                    quick += 1
                    self.assertTrue(binds, f"{fn} with {ns}: accepts_keywords says it binds, inspect does not")
        self.assertGreater(quick, 10)

    def test_common_tool_methods_need_no_inspect(self):
        class Env:
            def tool_move(self, direction, steps=1):
                pass

            def tool_look(self):
                pass

        e = Env()
        self.assertTrue(h.accepts_keywords(e.tool_move, ["direction", "steps"]))
        self.assertTrue(h.accepts_keywords(e.tool_move, ["direction"]))
        self.assertFalse(h.accepts_keywords(e.tool_move, ["steps"]))
        self.assertFalse(h.accepts_keywords(e.tool_move, ["direction", "speed"]))
        self.assertTrue(h.accepts_keywords(e.tool_look, []))
        self.assertFalse(h.accepts_keywords(e.tool_look, ["x"]))


if __name__ == "__main__":
    unittest.main()
