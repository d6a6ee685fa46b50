package openai

import (
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
)

// retryAfter reads the server-directed delay: retry-after-ms (OpenAI's
// millisecond extension) first, then Retry-After as delta-seconds or an
// HTTP-date (RFC 9110 section 10.2.3). Zero when absent or unparsable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && !math.IsInf(ms, 0) && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || math.IsNaN(s) || s > 1e9 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// backoff is the wait before retry attempt+1 when the server names none:
// d = min(base*2^attempt, max), then a value in [d/2, d] chosen by a hash
// of the request and attempt, so identical runs wait identically while
// different requests spread out instead of retrying in lockstep.
func backoff(base, maxD time.Duration, attempt int, seed uint64) time.Duration {
	d := base
	for i := 0; i < attempt && d < maxD; i++ {
		d *= 2
	}
	if d > maxD {
		d = maxD
	}
	x := splitmix64(seed + uint64(attempt)*0x9e3779b97f4a7c15)
	frac := float64(x>>11) / float64(1<<53)
	return d/2 + time.Duration(frac*float64(d/2))
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// requestSeed hashes the parts of a request that identify it, for jitter.
func requestSeed(modelName string, req model.Request) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, modelName)
	for _, m := range req.Messages {
		_, _ = io.WriteString(h, m.Role)
		_, _ = io.WriteString(h, m.Content)
	}
	_, _ = fmt.Fprintf(h, "|%d|%d", req.Seed, req.N)
	return h.Sum64()
}
