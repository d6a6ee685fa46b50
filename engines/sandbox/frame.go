package sandbox

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"unicode/utf8"
)

// Frames are a 4-byte big-endian payload length followed by that many bytes
// of UTF-8 JSON. A length prefix (rather than newline-delimited JSON) lets the
// reader refuse an oversized reply before reading it.
const frameHeader = 4

// errFrameTooLarge marks a reply whose declared length passes the limit.
var errFrameTooLarge = errors.New("frame too large")

// appendFrame appends one frame carrying payload to dst.
func appendFrame(dst, payload []byte) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	return append(dst, payload...)
}

// readFrame reads one frame from r into buf (grown as needed) and returns the
// payload. A declared length above limit returns errFrameTooLarge without
// reading the payload.
func readFrame(r io.Reader, buf []byte, limit int) ([]byte, []byte, error) {
	var hdr [frameHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, buf, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > limit {
		return nil, buf, fmt.Errorf("%w: %d bytes declared, limit %d", errFrameTooLarge, n, limit)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, buf, err
	}
	return buf, buf, nil
}

// reply is the union of every frame the harness sends; which fields are set
// depends on the request (see python/spade_harness.py).
type reply struct {
	OK        bool   `json:"ok"`
	Op        string `json:"op"` // "ended" after an episode process exits, "program_ended" after a program process exits
	Kind      Kind   `json:"kind"`
	Detail    string `json:"detail"`
	Traceback string `json:"traceback"`

	Ready  bool   `json:"ready"`
	Python string `json:"python"`

	Meta *wireMeta `json:"meta"`

	Obs        *string         `json:"obs"`
	Reward     Reward          `json:"reward"`
	Terminated bool            `json:"terminated"`
	Truncated  bool            `json:"truncated"`
	Forced     bool            `json:"forced_truncation"`
	Info       json.RawMessage `json:"info"`

	Exit   *int `json:"exit"`
	Signal *int `json:"signal"`
	Strays bool `json:"strays"`

	// Clean and Unclean answer a zygote's reap: whether the sandbox was
	// restored (no process left, /tmp and /dev/shm empty, /dev unchanged).
	Clean   bool     `json:"clean"`
	Unclean []string `json:"unclean"`

	ToolStatus
}

// decodeReply parses one reply payload. The payload is untrusted: any JSON
// error is a protocol failure of the environment's sandbox.
func decodeReply(payload []byte) (*reply, error) {
	if !utf8.Valid(payload) {
		// Python text may hold lone surrogates, which the harness sends as
		// their (invalid) UTF-8 bytes; decoding would replace them in
		// strings but keep them in the raw Info. Invalid bytes can only sit
		// inside JSON strings, so replacing them keeps the JSON intact.
		payload = bytes.ToValidUTF8(payload, []byte("\uFFFD"))
	}
	var r reply
	dec := json.NewDecoder(bytes.NewReader(payload))
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("decode reply frame: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decode reply frame: trailing data after JSON value")
	}
	return &r, nil
}

// Reward is a step reward. It decodes from a JSON number or from the strings
// "NaN", "Infinity" and "-Infinity", which the harness uses because JSON has
// no non-finite numbers; a NaN reward must reach the validator to be rejected
// (docs/method.md, "Known weaknesses": the public code lets NaN pass).
type Reward float64

// UnmarshalJSON implements json.Unmarshaler. JSON null leaves r as it
// is. Errors, prefixed "reward:": a string other than "NaN", "Infinity"
// and "-Infinity"; any other non-number (true, an object, ...); a number
// outside the float64 range (strconv.ErrRange), which is refused rather
// than read as an infinity.
func (r *Reward) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("reward: %w", err)
		}
		switch s {
		case "NaN":
			*r = Reward(math.NaN())
		case "Infinity":
			*r = Reward(math.Inf(1))
		case "-Infinity":
			*r = Reward(math.Inf(-1))
		default:
			return fmt.Errorf("reward: unexpected string %q", s)
		}
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("reward: %w", err)
	}
	*r = Reward(f)
	return nil
}
