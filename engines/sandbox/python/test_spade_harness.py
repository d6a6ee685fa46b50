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


if __name__ == "__main__":
    unittest.main()
