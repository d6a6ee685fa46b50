package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
)

// PollInterval is the wait between two readiness checks.
const PollInterval = 500 * time.Millisecond

// ProgressEvery is how often WaitReady logs that it is still waiting.
const ProgressEvery = 10 * time.Second

// ListModels asks GET <baseURL>/models (baseURL ends in /v1) and returns
// the ids of the listed models. Errors: a transport error, a status other
// than 200 (with the start of the body) or a body that is not an OpenAI
// model list.
func ListModels(ctx context.Context, client *http.Client, baseURL string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(baseURL, "/")+"/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/models: HTTP %d: %s", baseURL, resp.StatusCode, excerpt(body))
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("GET %s/models: not a model list: %w", baseURL, err)
	}
	ids := make([]string, len(list.Data))
	for i, d := range list.Data {
		ids[i] = d.ID
	}
	return ids, nil
}

// ChatModel sends a one-token chat completion naming served and returns
// the model the answer names. It is the readiness check for servers that
// list no model (transformers serve lists only models in the Hugging Face
// hub cache, so a local directory is never listed).
func ChatModel(ctx context.Context, client *http.Client, baseURL, served string) (string, error) {
	body, _ := json.Marshal(map[string]any{
		"model":       served,
		"messages":    []map[string]string{{"role": "user", "content": "ping"}},
		"max_tokens":  1,
		"temperature": 0,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(baseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("POST %s/chat/completions: HTTP %d: %s", baseURL, resp.StatusCode, excerpt(data))
	}
	var c struct {
		Model string `json:"model"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("POST %s/chat/completions: not a chat completion: %w", baseURL, err)
	}
	return c.Model, nil
}

// Check asks the server once whether it serves served: GET /v1/models
// lists it, or the list is empty and a one-token chat completion answers
// with it (model.SameServedModel). A list without it, or a chat answer
// from another model, is an error wrapping model.ErrStalePolicy that names
// what the server serves.
func Check(ctx context.Context, client *http.Client, baseURL, served string) error {
	ids, err := ListModels(ctx, client, baseURL)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(ids, func(id string) bool { return model.SameServedModel(id, served) }) {
		return nil
	}
	if len(ids) > 0 {
		return fmt.Errorf("%w: %s serves %s, not %s", model.ErrStalePolicy, baseURL, strings.Join(ids, ", "), served)
	}
	got, err := ChatModel(ctx, client, baseURL, served)
	if err != nil {
		return err
	}
	if !model.SameServedModel(got, served) {
		return fmt.Errorf("%w: %s answers as %q, not %s", model.ErrStalePolicy, baseURL, got, served)
	}
	return nil
}

// WaitReady polls Check every PollInterval until it succeeds, timeout
// passes (an error naming the last answer and, for a managed server, its
// log), ctx ends, or srv (nil for a server spade did not start) exits
// (its ExitError). It logs on log every ProgressEvery while it waits.
func WaitReady(ctx context.Context, log *slog.Logger, srv *Server, baseURL, served string, timeout time.Duration) error {
	if log == nil {
		log = slog.Default()
	}
	start := time.Now()
	deadline := start.Add(timeout)
	client := &http.Client{Timeout: 30 * time.Second}
	var exited <-chan struct{}
	if srv != nil {
		exited = srv.Exited()
	}
	lastLog := start
	var last error
	for {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		last = Check(cctx, client, baseURL, served)
		cancel()
		if last == nil {
			log.Info("model server ready", "base_url", baseURL, "served_model", served, "seconds", time.Since(start).Seconds())
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			where := ""
			if srv != nil {
				where = fmt.Sprintf("; the server's log %s ends with:\n%s", srv.LogPath, Tail(srv.LogPath, 20))
			}
			return fmt.Errorf("serve: %s did not serve %s within %s (model.serve_ready_timeout_s); last check: %w%s", baseURL, served, timeout, last, where)
		}
		if time.Since(lastLog) >= ProgressEvery {
			lastLog = time.Now()
			log.Info("waiting for the model server", "base_url", baseURL, "served_model", served, "waited_s", int(time.Since(start).Seconds()), "last", last.Error())
		}
		t := time.NewTimer(PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-exited:
			t.Stop()
			return srv.ExitError()
		case <-t.C:
		}
	}
}

func excerpt(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
