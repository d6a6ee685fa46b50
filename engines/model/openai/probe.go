package openai

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/spade-pipeline/spade/engines/model"
)

// ProbeTimeout bounds Probe, wall clock.
const ProbeTimeout = 10 * time.Second

// Probe asks whether the server answers at all: one GET /v1/models (no
// retries, ProbeTimeout at most, the same client, key and base URL as
// Chat). nil when an answer came back that is not a server-side failure
// (2xx, or a 4xx other than 408 and 429: a server without that route still
// answers); otherwise an error naming the status or the transport failure.
// engine.StageModel calls it when a stage part ends on failed calls, to
// tell an outage from a few flaky calls.
func (b *Backend) Probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, min(b.cfg.Timeout, ProbeTimeout))
	defer cancel()
	_, err := b.client.Models.List(pctx, option.WithMaxRetries(0))
	if err == nil {
		return nil
	}
	var apiErr *oa.Error
	if errors.As(err, &apiErr) {
		st := apiErr.StatusCode
		if st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests {
			return nil
		}
		return fmt.Errorf("%s: probe GET /models: HTTP %d", b.name, st)
	}
	return fmt.Errorf("%s: probe GET /models: %s", b.name, b.redact(stableText(err)))
}

// PreflightTimeout bounds Preflight, wall clock.
const PreflightTimeout = 5 * time.Second

// Preflight is the check at the start of a stage that calls the model:
// one GET /v1/models within PreflightTimeout (no retries), so that a
// server that is down fails the stage in seconds, not through every
// call's retries. nil when the server answers (as Probe: a 4xx other
// than 408 and 429 is an answer); otherwise an error wrapping
// model.ErrUnavailable that names the base URL.
func (b *Backend) Preflight(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, PreflightTimeout)
	defer cancel()
	err := b.Probe(pctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w: model.base_url %s does not answer: %w", model.ErrUnavailable, strings.TrimSuffix(b.redact(logEndpoint(b.cfg.BaseURL)), "/chat/completions"), err)
}
