package streams

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSized(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		declared int64
		wantErr  bool
	}{
		{"exact", "hello", 5, false},
		{"empty", "", 0, false},
		{"unknown", "hello", -1, false},
		{"short", "hel", 5, true},
		{"long", "hello!", 5, true},
		{"empty but declared", "", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// OneByteReader makes the count cross the limit mid-stream.
			got, err := io.ReadAll(Sized(iotest.OneByteReader(strings.NewReader(tc.body)), tc.declared))
			if tc.wantErr {
				if !errors.Is(err, ErrSizeMismatch) {
					t.Fatalf("err = %v, want ErrSizeMismatch", err)
				}
				return
			}
			if err != nil || string(got) != tc.body {
				t.Fatalf("got %q, %v; want %q", got, err, tc.body)
			}
		})
	}
}

func TestWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := WithContext(ctx, strings.NewReader("abcdef"))
	buf := make([]byte, 2)
	if n, err := r.Read(buf); n != 2 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	cancel()
	if _, err := r.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: %v", err)
	}
	rc := ReadCloserWithContext(ctx, io.NopCloser(strings.NewReader("x")))
	if _, err := rc.Read(buf); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadCloser read after cancel: %v", err)
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
}
