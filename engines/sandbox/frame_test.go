package sandbox

import (
	"bytes"
	"errors"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	buf.Write(appendFrame(nil, []byte(`{"ok":true}`)))
	buf.Write(appendFrame(nil, []byte(`{}`)))
	p, rb, err := readFrame(&buf, nil, 100)
	require.NoError(t, err)
	assert.Equal(t, `{"ok":true}`, string(p))
	p, _, err = readFrame(&buf, rb, 100)
	require.NoError(t, err)
	assert.Equal(t, `{}`, string(p))
	_, _, err = readFrame(&buf, nil, 100)
	assert.ErrorIs(t, err, io.EOF)
}

func TestReadFrameLimits(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"oversized", appendFrame(nil, bytes.Repeat([]byte("x"), 200)), errFrameTooLarge},
		{"truncated header", []byte{0, 0}, io.ErrUnexpectedEOF},
		{"truncated body", appendFrame(nil, []byte("abcdef"))[:7], io.ErrUnexpectedEOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readFrame(bytes.NewReader(tc.in), nil, 100)
			assert.True(t, errors.Is(err, tc.want), "got %v", err)
		})
	}
}

func TestDecodeReply(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		wantErr bool
		check   func(t *testing.T, r *reply)
	}{
		{"step", `{"ok":true,"obs":"o","reward":0.5,"terminated":true,"truncated":false,"info":{"success":true}}`, false,
			func(t *testing.T, r *reply) {
				assert.Equal(t, Reward(0.5), r.Reward)
				assert.JSONEq(t, `{"success":true}`, string(r.Info))
			}},
		{"nan", `{"ok":true,"obs":"o","reward":"NaN"}`, false, func(t *testing.T, r *reply) { assert.True(t, math.IsNaN(float64(r.Reward))) }},
		{"-inf", `{"ok":true,"obs":"o","reward":"-Infinity"}`, false, func(t *testing.T, r *reply) { assert.True(t, math.IsInf(float64(r.Reward), -1)) }},
		{"ended", `{"op":"ended","signal":9,"strays":true}`, false, func(t *testing.T, r *reply) {
			assert.Equal(t, 9, *r.Signal)
			assert.True(t, r.Strays)
		}},
		{"bad reward string", `{"ok":true,"reward":"lots"}`, true, nil},
		{"trailing", `{"ok":true} {"ok":false}`, true, nil},
		{"not json", `NaN`, true, nil},
		{"wrong type", `{"ok":"yes"}`, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeReply([]byte(tc.in))
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			tc.check(t, r)
		})
	}
}

// FuzzDecodeReply: reply frames come from untrusted code (it can write to
// fd 4 directly); decoding must never panic.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range []string{
		`{"ok":true,"obs":"o","reward":1,"terminated":false,"truncated":false,"info":{}}`,
		`{"ok":false,"kind":"exception","detail":"x","traceback":"t"}`,
		`{"op":"ended","exit":3}`,
		`{"ok":true,"meta":{"class":"A","kind":"game","max_turns":5,"reward_range":[0,"Infinity"],"tools":[{"name":"x"}]}}`,
		`{"ok":true,"criteria":[true],"missing_keys":[["a"]],"solution":null}`,
		`{"reward":"NaN"}`, `[]`, `null`, `{"reward":1e999}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeReply(data)
		if err == nil && r.Meta != nil {
			_ = r.Meta.clean()
		}
	})
}

// FuzzReadFrame: the frame reader must respect the limit and never panic on
// arbitrary bytes.
func FuzzReadFrame(f *testing.F) {
	f.Add(appendFrame(nil, []byte(`{"ok":true}`)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, _, err := readFrame(bytes.NewReader(data), nil, 64)
		if err == nil && len(p) > 64 {
			t.Fatalf("payload of %d bytes passed the 64-byte limit", len(p))
		}
	})
}

// TestMetaTextCut: a load reply is written by code in the program's
// process, which can replace the harness's 200-character cut of name and
// skill; Meta keeps at most 200 bytes of class, kind, name and skill,
// whole characters only.
func TestMetaTextCut(t *testing.T) {
	long := strings.Repeat("n", 300000)
	r, err := decodeReply([]byte(`{"ok":true,"meta":{"class":"` + long + `","kind":"` + long + `","name":"` + long + `","skill":"` + strings.Repeat("é", 150) + `","max_turns":3}}`))
	require.NoError(t, err)
	m := r.Meta.clean()
	assert.Equal(t, long[:200], m.Class)
	assert.Equal(t, long[:200], m.Kind)
	assert.Equal(t, long[:200], m.Name)
	assert.Equal(t, strings.Repeat("é", 100), m.Skill, "200 bytes, whole characters")
	assert.Equal(t, 3, m.MaxTurns)
}

// TestHarnessErrorBounds: an error reply comes from the program's process,
// which can rewrite the harness: its detail and traceback are cut to 4,000
// bytes (the traceback keeps its end), and a kind the harness never sends
// is reported as protocol.
func TestHarnessErrorBounds(t *testing.T) {
	big := strings.Repeat("d", 1<<20)
	err := harnessError("step", &reply{Kind: KindException, Detail: big, Traceback: big + "END"})
	var se *Error
	require.True(t, errors.As(err, &se))
	assert.Equal(t, KindException, se.Kind)
	assert.Len(t, se.Detail, 4000)
	assert.Len(t, se.Traceback, 4000)
	assert.True(t, strings.HasSuffix(se.Traceback, "END"))

	err = harnessError("step", &reply{Kind: Kind(strings.Repeat("\x1b[2K", 1000)), Detail: "boom"})
	require.True(t, errors.As(err, &se))
	assert.Equal(t, KindProtocol, se.Kind)
	assert.Contains(t, se.Detail, "unknown kind")
	assert.Contains(t, se.Detail, "boom")
	assert.Less(t, len(se.Error()), 400)

	for _, k := range []Kind{KindTimeout, KindCanceled, KindCrash} {
		require.True(t, errors.As(harnessError("reset", &reply{Kind: k}), &se))
		assert.Equal(t, KindProtocol, se.Kind, "%s is the Go side's to decide", k)
	}
	require.True(t, errors.As(harnessError("reset", &reply{}), &se))
	assert.Equal(t, KindProtocol, se.Kind)
	assert.Empty(t, se.Detail)
}
