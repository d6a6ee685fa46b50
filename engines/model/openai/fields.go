package openai

import (
	"fmt"
	"net/http"
	"strings"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"

	"github.com/spade-pipeline/spade/engines/model"
)

// tokenFields are the request fields that ask vLLM and SGLang for token
// ids: vLLM's return_token_ids (prompt_token_ids at the top level,
// token_ids per choice; vLLM >= 0.10.2) and return_tokens_as_token_ids
// (logprobs tokens written "token_id:N", older vLLM), SGLang's
// return_token_ids and return_prompt_token_ids (both per choice).
var tokenFields = map[string]any{
	"return_token_ids":           true,
	"return_prompt_token_ids":    true,
	"return_tokens_as_token_ids": true,
}

// params is req on the wire: toParams, then tool_choice, the token
// fields while askTokens holds, and Config.ExtraBody; askedTokens says
// whether these params carry the token fields (the caller's retry
// without them depends on it, whatever other calls have learnt since).
// Errors wrap model.ErrBadRequest, prefixed with the backend's name.
func (b *Backend) params(req model.Request) (params oa.ChatCompletionNewParams, askedTokens bool, err error) {
	params, err = toParams(b.cfg.Model, req)
	if err != nil {
		return params, false, fmt.Errorf("%s: %w", b.name, err)
	}
	if b.cfg.ToolChoice != "" && len(req.Tools) > 0 {
		params.ToolChoice = oa.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt(b.cfg.ToolChoice)}
	}
	askedTokens = b.askTokens()
	if askedTokens {
		params.Logprobs = oa.Bool(true)
	}
	if extra := b.extraFields(askedTokens); len(extra) > 0 {
		params.SetExtraFields(extra)
	}
	return params, askedTokens, nil
}

// askTokens reports whether requests ask for token ids now:
// Config.ReturnTokens, unless the server refused the fields.
func (b *Backend) askTokens() bool { return b.cfg.ReturnTokens && !b.tokensRefused.Load() }

// TokensRefused reports whether the server refused the token fields of
// Config.ReturnTokens, so that calls no longer ask for token ids.
func (b *Backend) TokensRefused() bool { return b.tokensRefused.Load() }

// refusesTokenFields reports whether a failed attempt is a server's
// refusal of the token fields: HTTP 400 or 422 whose message names one of
// them or logprobs (vLLM and OpenAI answer 400 to unknown or unsupported
// parameters, FastAPI-based servers 422).
func refusesTokenFields(cerr *model.CallError) bool {
	if cerr.Status != http.StatusBadRequest && cerr.Status != http.StatusUnprocessableEntity {
		return false
	}
	m := strings.ToLower(cerr.Message)
	for k := range tokenFields {
		if strings.Contains(m, k) {
			return true
		}
	}
	return strings.Contains(m, "logprobs")
}

// extraFields is the request's extra top-level fields: tokenFields while
// askTokens holds, then Config.ExtraBody over them.
func (b *Backend) extraFields(askTokens bool) map[string]any {
	if !askTokens {
		return b.cfg.ExtraBody
	}
	out := make(map[string]any, len(tokenFields)+len(b.cfg.ExtraBody))
	for k, v := range tokenFields {
		out[k] = v
	}
	for k, v := range b.cfg.ExtraBody {
		out[k] = v
	}
	return out
}
