// Package replay records model calls and plays them back, which makes any
// round reproducible byte for byte (docs/design.md "Engines the stages share":
// every call can be recorded to llm_calls and replayed).
//
// Identity of a call. A request is identified by RequestHash, the hex
// SHA-256 of its canonical JSON (see Canonical): backend name, every
// message, tool, sampling parameter and Meta entry. Two calls with equal
// hashes are "identical requests"; they are told apart by Occurrence, the
// 0-based order in which they reached the Recorder (counted when the call
// starts, not when it ends).
//
// The ordering rule. Calls() is sorted by (RequestHash, Occurrence), which
// does not depend on goroutine scheduling, so the llm_calls table is
// deterministic. A Replayer serves the k-th arrival of a hash the call
// recorded with Occurrence k. When identical requests run concurrently,
// which goroutine arrives k-th is up to the scheduler, both when recording
// and when replaying: if the recorded responses differ (a sampling server),
// the pairing of callers to responses is unspecified. Callers that need a
// fixed pairing make requests distinct, which Meta exists for: the
// pipeline puts the slot, sample and attempt into Meta, so that in
// practice every Occurrence is 0. Identical requests made one after the
// other (sequentially) replay exactly.
//
// Latency. LatencyMS is wall-clock and differs run to run; it is stored in
// llm_calls only and never influences a Response, so replayed tables equal
// recorded ones.
package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
)

// ErrMiss is wrapped by Replayer.Chat when no recorded call matches.
var ErrMiss = errors.New("replay: no recorded call for request")

// ErrRecordedFailure is wrapped by Replayer.Chat when the recorded call
// failed: the error text is the recorded Error.
var ErrRecordedFailure = errors.New("replay: recorded call failed")

// Call is one recorded model call: a plain row for the llm_calls table.
type Call struct {
	// RequestHash is the hex SHA-256 of Request (the canonical JSON).
	RequestHash string `json:"request_hash"`
	// Occurrence orders identical requests (same RequestHash) by arrival,
	// from 0 (see the package doc for the rule).
	Occurrence int64 `json:"occurrence"`
	// Backend is the recorded backend's Name(), e.g. "openai:qwen3-8b".
	Backend string `json:"backend"`
	// Request is the canonical JSON of the request (see Canonical).
	Request string `json:"request"`
	// Response is the JSON of the model.Response, empty when Error is set.
	Response string `json:"response"`
	// Error is the error text of a failed call, empty on success.
	Error string `json:"error"`
	// LatencyMS is the wall-clock duration of the call in milliseconds.
	LatencyMS int64 `json:"latency_ms"`
}

// canonical is the hashed envelope: field order is fixed by the struct,
// Meta keys are sorted by encoding/json.
type canonical struct {
	Backend string        `json:"backend"`
	Request model.Request `json:"request"`
}

// Canonical returns the canonical JSON of (backend, req) and its hex
// SHA-256. Canonical form: encoding/json of {"backend", "request"} with
// the model.Request field order, Meta keys sorted, nil and empty slices
// alike, N of 0 written as 1 (they mean the same), an empty Meta omitted.
// Errors: only if req holds a value encoding/json rejects (a NaN or
// infinite Temperature/TopP).
func Canonical(backend string, req model.Request) (string, string, error) {
	r := req
	if r.N == 0 {
		r.N = 1
	}
	if r.Messages == nil {
		r.Messages = []model.Message{}
	}
	if len(r.Meta) == 0 {
		r.Meta = nil
	}
	msgs := make([]model.Message, len(r.Messages))
	for i, m := range r.Messages {
		if len(m.ToolCalls) == 0 {
			m.ToolCalls = nil
		}
		msgs[i] = m
	}
	r.Messages = msgs
	if len(r.Tools) == 0 {
		r.Tools = nil
	}
	if len(r.Stop) == 0 {
		r.Stop = nil
	}
	b, err := json.Marshal(canonical{Backend: backend, Request: r})
	if err != nil {
		return "", "", fmt.Errorf("replay: canonical JSON of request: %w", err)
	}
	sum := sha256.Sum256(b)
	return string(b), hex.EncodeToString(sum[:]), nil
}

// Recorder wraps a Backend and records every call. It is a model.Backend
// itself (same Name), safe for concurrent use.
type Recorder struct {
	inner model.Backend
	now   func() time.Time

	mu    sync.Mutex
	seen  map[string]int64
	calls []Call
}

// NewRecorder wraps inner.
func NewRecorder(inner model.Backend) *Recorder {
	return &Recorder{inner: inner, now: time.Now, seen: map[string]int64{}}
}

// Name returns the wrapped backend's name, so recorded and live runs write
// the same backend column.
func (r *Recorder) Name() string { return r.inner.Name() }

// Chat forwards to the wrapped backend and records the call, successful
// or not. Errors: the wrapped backend's error, unchanged; an error from
// Canonical (the call is then not made).
func (r *Recorder) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	reqJSON, hash, err := Canonical(r.inner.Name(), req)
	if err != nil {
		return model.Response{}, err
	}
	r.mu.Lock()
	occ := r.seen[hash]
	r.seen[hash] = occ + 1
	r.mu.Unlock()

	start := r.now()
	resp, callErr := r.inner.Chat(ctx, req)
	latency := r.now().Sub(start)

	c := Call{RequestHash: hash, Occurrence: occ, Backend: r.inner.Name(), Request: reqJSON, LatencyMS: latency.Milliseconds()}
	if callErr != nil {
		c.Error = callErr.Error()
	} else {
		b, err := json.Marshal(resp)
		if err != nil {
			return resp, fmt.Errorf("replay: encode response of %s: %w", hash, err)
		}
		c.Response = string(b)
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	return resp, callErr
}

// Calls returns the calls recorded so far sorted by (RequestHash,
// Occurrence): an order independent of scheduling.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	out := append([]Call(nil), r.calls...)
	r.mu.Unlock()
	SortCalls(out)
	return out
}

// SortCalls sorts calls by (RequestHash, Occurrence) in place.
func SortCalls(calls []Call) {
	sort.Slice(calls, func(i, j int) bool {
		if calls[i].RequestHash != calls[j].RequestHash {
			return calls[i].RequestHash < calls[j].RequestHash
		}
		return calls[i].Occurrence < calls[j].Occurrence
	})
}

// Replayer is a model.Backend that answers from recorded Calls. Safe for
// concurrent use.
type Replayer struct {
	name string

	mu    sync.Mutex
	byKey map[string][]Call // hash -> calls indexed by Occurrence
	next  map[string]int64
}

// NewReplayer builds a Replayer named name (the recorded backend's Name(),
// which is part of every request hash) from calls in any order. It checks
// each call: RequestHash must be the hash of Request, Response must decode,
// and each hash's Occurrences must be 0..n-1 without gaps or duplicates.
// Errors name the offending call by index and hash.
func NewReplayer(name string, calls []Call) (*Replayer, error) {
	rp := &Replayer{name: name, byKey: map[string][]Call{}, next: map[string]int64{}}
	sorted := append([]Call(nil), calls...)
	SortCalls(sorted)
	for i, c := range sorted {
		sum := sha256.Sum256([]byte(c.Request))
		if hex.EncodeToString(sum[:]) != c.RequestHash {
			return nil, fmt.Errorf("replay: call %d (hash %s): field request_hash does not match the SHA-256 of field request", i, c.RequestHash)
		}
		if c.Error == "" {
			var resp model.Response
			if err := json.Unmarshal([]byte(c.Response), &resp); err != nil {
				return nil, fmt.Errorf("replay: call %d (hash %s): field response: %w", i, c.RequestHash, err)
			}
		}
		have := int64(len(rp.byKey[c.RequestHash]))
		if c.Occurrence != have {
			return nil, fmt.Errorf("replay: call %d (hash %s): field occurrence is %d, want %d (occurrences must run 0..n-1 without duplicates)", i, c.RequestHash, c.Occurrence, have)
		}
		rp.byKey[c.RequestHash] = append(rp.byKey[c.RequestHash], c)
	}
	return rp, nil
}

// Name returns the name given to NewReplayer.
func (r *Replayer) Name() string { return r.name }

// Chat returns the recorded response for req. Errors: ErrMiss (wrapped,
// naming the hash, the occurrence and an excerpt of the first message)
// when nothing was recorded for this request or all its occurrences are
// used up; ErrRecordedFailure (wrapped, with the recorded text) when the
// recorded call failed; ctx.Err() if ctx is already done.
func (r *Replayer) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	if err := ctx.Err(); err != nil {
		return model.Response{}, fmt.Errorf("replay: %w", err)
	}
	_, hash, err := Canonical(r.name, req)
	if err != nil {
		return model.Response{}, err
	}
	r.mu.Lock()
	occ := r.next[hash]
	calls := r.byKey[hash]
	if occ < int64(len(calls)) {
		r.next[hash] = occ + 1
	}
	r.mu.Unlock()
	if occ >= int64(len(calls)) {
		return model.Response{}, fmt.Errorf("%w: hash %s occurrence %d (%d recorded), backend %s, first message %q",
			ErrMiss, hash, occ, len(calls), r.name, excerpt(req))
	}
	c := calls[occ]
	if c.Error != "" {
		return model.Response{}, fmt.Errorf("%w: %s", ErrRecordedFailure, c.Error)
	}
	var resp model.Response
	if err := json.Unmarshal([]byte(c.Response), &resp); err != nil {
		return model.Response{}, fmt.Errorf("replay: hash %s: decode response: %w", hash, err)
	}
	return resp, nil
}

// excerpt is the first message's role and up to 80 runes of its text.
func excerpt(req model.Request) string {
	if len(req.Messages) == 0 {
		return ""
	}
	m := req.Messages[0]
	s := []rune(m.Content)
	if len(s) > 80 {
		return m.Role + ": " + string(s[:80]) + "..."
	}
	return m.Role + ": " + string(s)
}
