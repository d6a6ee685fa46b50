package faults

import (
	"encoding/csv"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

// modelConfig runs one small round against an OpenAI-compatible server
// with short deadlines: 2 s per model attempt, 2 s per sandbox call.
const modelConfig = `seed: 7
workers: 2
regenerate_every: 1
sample:
  slots: 3
  setting: game
design:
  slots_per_part: 2
  max_attempts: 2
rollout:
  group_size: 3
  envs_per_part: 2
  max_turns: 8
model:
  backend: openai
  base_url: %s
  name: modeltest-1
  timeout_s: 2
  max_retries: 3
  concurrency: 4
sandbox:
  call_timeout_s: 2
`

// modelRoundLimit bounds the faulty round's wall time: every wait in it
// is bounded by a configured deadline (model timeout x attempts, sandbox
// call timeout), so a hang anywhere shows as a breach of this bound.
const modelRoundLimit = 150 * time.Second

// The three slots of round 1 get the first three skills; the handler keys
// its misbehaviour on them.
const (
	skillLoop  = "logical_deduction" // designs an environment whose step never returns
	skillEmpty = "spatial_reasoning" // every designer answer has no choices
	skillBadRq = "causal_inference"  // hinted plays end in a 400 at turn 2
	contextMsg = "maximum context length exceeded (injected)"
)

// variantSource is the default environment with a per-skill observation,
// so each slot's environment has its own env_id.
func variantSource(skill string) string {
	return strings.Replace(modeltest.DefaultEnvSource, "Reach the target total exactly.", "Reach the target total exactly (variant "+skill+").", 1)
}

// loopSource is an environment whose step spins forever.
func loopSource() string {
	src := variantSource(skillLoop)
	return strings.Replace(src, "    def step(self, action):\n", "    def step(self, action):\n        while True:\n            pass\n", 1)
}

// transient are the faults injected into a share of all calls; all but
// empty choices and the 1 MiB answer are retried by the openai backend.
var transient = []modeltest.Fault{
	{Kind: modeltest.FaultRateLimit, RetryAfter: "1"},
	{Kind: modeltest.FaultServerError},
	{Kind: modeltest.FaultTruncated},
	{Kind: modeltest.FaultHang},
	{Kind: modeltest.FaultSlow, Delay: 500 * time.Millisecond},
	{Kind: modeltest.FaultEmptyChoices},
	{Kind: modeltest.FaultHuge},
}

// chatText is every message content of req, each followed by a newline;
// split out of TestModelServerFaults' handler.
func chatText(req modeltest.Request) string {
	var text strings.Builder
	for _, m := range req.Chat.Messages {
		text.WriteString(m.Content)
		text.WriteByte('\n')
	}
	return text.String()
}

// assistantTurns counts the assistant messages of req; split out of
// TestModelServerFaults' handler.
func assistantTurns(req modeltest.Request) int {
	turns := 0
	for _, m := range req.Chat.Messages {
		if m.Role == model.RoleAssistant {
			turns++
		}
	}
	return turns
}

// TestModelServerFaults runs a round with model.backend openai against
// modeltest, which answers a share of calls with 429 + Retry-After, 500,
// truncated JSON, empty choices, 1 MiB answers, slow answers and hangs
// past model.timeout_s, plus three deliberate per-slot failures: a
// designer that writes an environment whose step never returns, a
// designer whose answers are always empty, and hinted plays that hit a
// 400. The round completes within a bound set by the configured
// deadlines; the looping environment is rejected by the sandbox timeout
// and recorded; the empty slot's attempts and the failed plays carry
// their errors in the error columns.
func TestModelServerFaults(t *testing.T) {
	var injected [16]atomic.Int64
	var eligible atomic.Int64
	base := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)
	handler := func(req modeltest.Request) modeltest.Reply {
		all := chatText(req)
		role := modeltest.Classify(req.Chat)
		// Deliberate, deterministic failures first.
		switch {
		case role == modeltest.RoleDesign && strings.Contains(all, skillEmpty):
			injected[modeltest.FaultEmptyChoices].Add(1)
			return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultEmptyChoices}}
		case role == modeltest.RoleAgent && strings.Contains(all, "(variant "+skillBadRq+")") && strings.Contains(all, modeltest.DefaultHint):
			if assistantTurns(req) >= 1 {
				injected[modeltest.FaultBadRequest].Add(1)
				return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultBadRequest, Message: contextMsg}}
			}
		}
		// Transient faults on every third call that reaches here, cycling
		// through the kinds so that each one occurs once 3*len(transient)
		// such calls have arrived. The count is of these calls, not of the
		// arrival index: with concurrent slots the deliberate failures
		// above land on varying indices and would otherwise swallow a
		// kind's only turn.
		var f modeltest.Fault
		if n := int(eligible.Add(1)) - 1; n%3 == 1 {
			f = transient[(n/3)%len(transient)]
		}
		reply := base(req)
		if role == modeltest.RoleDesign {
			src := variantSource("other")
			switch {
			case strings.Contains(all, skillLoop):
				src = loopSource()
			case strings.Contains(all, skillBadRq):
				src = variantSource(skillBadRq)
			}
			for i := range reply.Choices {
				reply.Choices[i].Message.Content = "Here is the environment.\n\n```python\n" + src + "```\n"
			}
		}
		if f.Kind != modeltest.FaultNone {
			injected[f.Kind].Add(1)
			reply.Fault = f
		}
		return reply
	}
	srv := modeltest.Start(t, modeltest.WithHandler(handler))
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", fmt.Sprintf(modelConfig, srv.URL))

	r := spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, r.code, "a round against a faulty model server completes: %s", tail(r.stderr, 4000))
	require.Less(t, r.took, modelRoundLimit, "nothing waits past the configured deadlines")
	t.Logf("round took %s over %d model calls", r.took.Round(time.Second), srv.Count())
	logQuery := func(q string) {
		res := spade(t, dir, nil, "--config", cfg, "sql", "--format", "csv", q)
		t.Logf("%s:\n%s%s", q, res.stdout, res.stderr)
	}
	if testing.Verbose() {
		logQuery("select slot_id, skill from slots")
		logQuery("select slot_id, attempt, substr(error, 1, 120) from designs")
		logQuery("select slot_id, env_id, valid, reason from environments")
		logQuery("select env_id, hinted, sample, turns, substr(error, 1, 100) from rollouts")
	}
	for _, k := range []modeltest.FaultKind{modeltest.FaultRateLimit, modeltest.FaultServerError, modeltest.FaultTruncated,
		modeltest.FaultHang, modeltest.FaultSlow, modeltest.FaultEmptyChoices, modeltest.FaultHuge, modeltest.FaultBadRequest} {
		t.Logf("%s: %d", k, injected[k].Load())
		require.Positive(t, injected[k].Load(), "fault %s was injected", k)
	}

	query := func(q string) [][]string {
		t.Helper()
		res := spade(t, dir, nil, "--config", cfg, "sql", "--format", "csv", q)
		require.Equal(t, 0, res.code, res.stderr)
		recs, err := csv.NewReader(strings.NewReader(res.stdout)).ReadAll()
		require.NoError(t, err)
		return recs[1:]
	}
	// The looping environment: rejected by the sandbox timeout, recorded.
	loop := query(fmt.Sprintf(`select e.valid, e.reason from environments e join slots s using (slot_id) where s.skill = '%s'`, skillLoop))
	require.Len(t, loop, 1, "the looping environment has a row")
	require.Equal(t, "false", loop[0][0], "an environment whose step never returns is not valid")
	loopErr := query(fmt.Sprintf(`select d.error from designs d join slots s using (slot_id) where s.skill = '%s' and d.final`, skillLoop))
	require.Len(t, loopErr, 1)
	require.Contains(t, loopErr[0][0], "timeout", "the design row records the sandbox timeout")
	require.Contains(t, loopErr[0][0], "sandbox killed")

	// The empty slot: every attempt recorded with its error, no environment.
	empty := query(fmt.Sprintf(`select d.attempt, d.error from designs d join slots s using (slot_id) where s.skill = '%s' order by d.attempt`, skillEmpty))
	require.Len(t, empty, 2, "max_attempts attempts recorded")
	for _, row := range empty {
		require.Contains(t, row[1], "response has no choices", "attempt %s carries the model error", row[0])
	}
	require.Empty(t, query(fmt.Sprintf(`select env_id from environments e join slots s using (slot_id) where s.skill = '%s'`, skillEmpty)))

	// Hinted plays of the third environment fail at turn 2 with the 400.
	bad := query(fmt.Sprintf(`select r.hinted, r.error from rollouts r join environments e using (env_id) join slots s using (slot_id) where s.skill = '%s' order by r.hinted, r.sample`, skillBadRq))
	require.Len(t, bad, 6, "3 + 3 plays of the valid environment")
	var hinted400 int
	for _, row := range bad {
		if row[0] == "true" {
			require.NotEmpty(t, row[1], "every hinted play fails and says why")
			if strings.Contains(row[1], contextMsg) {
				hinted400++
			}
		}
	}
	require.Positive(t, hinted400, "a hinted play carries the model's 400 in its error column")
	// Every design call is recorded, failures included.
	calls := query(`select count(*) filter (where error <> ''), count(*) from design_calls`)
	require.NotEqual(t, "0", calls[0][0], "failed designer calls are recorded in design_calls")
}

// TestModelServerOutage: while the model server answers every call with
// 503, round 1 fails (exit 1, "server unavailable") after
// model.unavailable_after failed calls instead of committing a round of
// errors, and nothing of it is committed; once the server answers, the
// same command resumes the round, which then equals a run that never saw
// the outage.
func TestModelServerOutage(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	var refused atomic.Int64
	base := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)
	srv := modeltest.Start(t, modeltest.WithHandler(func(req modeltest.Request) modeltest.Reply {
		if down.Load() {
			refused.Add(1)
			return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultUnavailable}}
		}
		return base(req)
	}))
	dir := t.TempDir()
	text := strings.Replace(fmt.Sprintf(modelConfig, srv.URL), "  max_retries: 3\n", "  max_retries: 1\n  unavailable_after: 4\n", 1)
	require.Contains(t, text, "unavailable_after: 4")
	cfg := writeFile(t, dir, "cfg.yaml", text)

	r := spade(t, dir, nil, "--config", cfg, "--run", "outage", "round", "1")
	require.Equal(t, 1, r.code, "a round against a server that is down fails: %s", tail(r.stderr, 2000))
	require.Contains(t, r.stderr, "server unavailable")
	require.Contains(t, r.stderr, "HTTP 503")
	// 4 calls in a row (2 attempts each) stop the stage; calls already in
	// flight (concurrency 4) may add a few more.
	require.LessOrEqual(t, refused.Load(), int64(2*(4+4)), "the stage stopped calling the server")
	st := spade(t, dir, nil, "--config", cfg, "--run", "outage", "status", "--json")
	require.Equal(t, 0, st.code, st.stderr)
	require.Contains(t, st.stdout, `"next_round":1,`, "round 1 is not sealed: %s", st.stdout)
	require.NotContains(t, st.stdout, `"table":"designs"`, "the design stage committed nothing: %s", st.stdout)

	down.Store(false)
	r = spade(t, dir, nil, "--config", cfg, "--run", "outage", "round", "1")
	require.Equal(t, 0, r.code, "the round resumes once the server answers: %s", tail(r.stderr, 2000))
	r = spade(t, dir, nil, "--config", cfg, "--run", "clean", "round", "1")
	require.Equal(t, 0, r.code, tail(r.stderr, 2000))
	d := spade(t, dir, nil, "--config", cfg, "diff", "outage", "clean")
	require.Equal(t, 0, d.code, "the resumed run equals a run without the outage: %s%s", d.stdout, d.stderr)
}

// TestHintFailure: when every hint call fails (a 400, recorded in the
// hints table), no hinted arm is played: the labels have no regret
// instead of a regret measured between two unhinted arms, and no designer
// reward (NULL: the environments were not measured; a failed model call
// must not score the designer -1, docs/regret.md).
func TestHintFailure(t *testing.T) {
	base := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)
	srv := modeltest.Start(t, modeltest.WithHandler(func(req modeltest.Request) modeltest.Reply {
		if modeltest.Classify(req.Chat) == modeltest.RoleHint {
			return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultBadRequest, Message: "hint refused (injected)"}}
		}
		return base(req)
	}))
	dir := t.TempDir()
	cfg := writeFile(t, dir, "cfg.yaml", fmt.Sprintf(modelConfig, srv.URL))
	r := spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, r.code, tail(r.stderr, 2000))
	res := spade(t, dir, nil, "--config", cfg, "sql", "--format", "csv", `select
		(select count(*) from hints where error like '%hint refused (injected)%'),
		(select count(*) from hints),
		(select count(*) filter (where hinted) from rollouts),
		(select count(*) filter (where not hinted) from rollouts),
		(select count(*) from labels where valid and regret is null and designer_reward is null),
		(select count(*) from labels where valid)`)
	require.Equal(t, 0, res.code, res.stderr)
	recs, err := csv.NewReader(strings.NewReader(res.stdout)).ReadAll()
	require.NoError(t, err)
	got := recs[1]
	require.NotEqual(t, "0", got[1], "valid environments had hint calls")
	require.Equal(t, got[1], got[0], "every hint row carries the model's error")
	require.Equal(t, "0", got[2], "no hinted arm without a hint")
	require.NotEqual(t, "0", got[3], "the unhinted arm is played")
	require.Equal(t, got[5], got[4], "every valid environment: no regret, no designer reward")
}

// TestModelServerOutageMidStage: the server goes down (every request 503,
// /v1/models too) in the middle of the rollout stage, after some plays
// were answered. The parts that end on the failures see the server not
// answering a probe and fail, so nothing with the outage's errors is
// committed; once the server is back, the rerun equals a run that never
// saw the outage.
func TestModelServerOutageMidStage(t *testing.T) {
	var srv *modeltest.Server
	var agentCalls atomic.Int64
	base := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)
	srv = modeltest.Start(t, modeltest.WithHandler(func(req modeltest.Request) modeltest.Reply {
		if modeltest.Classify(req.Chat) == modeltest.RoleAgent && agentCalls.Add(1) == 10 {
			srv.SetDown(true) // this answer is still given; every later request is a 503
		}
		return base(req)
	}))
	dir := t.TempDir()
	text := strings.Replace(fmt.Sprintf(modelConfig, srv.URL), "  max_retries: 3\n", "  max_retries: 1\n", 1)
	cfg := writeFile(t, dir, "cfg.yaml", text)

	r := spade(t, dir, nil, "--config", cfg, "--run", "outage", "round", "1")
	require.Equal(t, 1, r.code, "the round fails while the server is down: %s", tail(r.stderr, 2000))
	require.Contains(t, r.stderr, "server unavailable")
	require.Positive(t, srv.Refused())
	st := spade(t, dir, nil, "--config", cfg, "--run", "outage", "status", "--json")
	require.Equal(t, 0, st.code, st.stderr)
	require.NotContains(t, st.stdout, `"table":"rollouts"`, "no rollouts with the outage's errors are committed: %s", st.stdout)

	srv.SetDown(false)
	r = spade(t, dir, nil, "--config", cfg, "--run", "outage", "round", "1")
	require.Equal(t, 0, r.code, tail(r.stderr, 2000))
	r = spade(t, dir, nil, "--config", cfg, "--run", "clean", "round", "1")
	require.Equal(t, 0, r.code, tail(r.stderr, 2000))
	d := spade(t, dir, nil, "--config", cfg, "diff", "outage", "clean")
	require.Equal(t, 0, d.code, "the resumed run equals a run without the outage: %s%s", d.stdout, d.stderr)
}
