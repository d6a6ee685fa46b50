// Package schemas says what the pipeline stores: one Go row type per table,
// with explicit Parquet tags, a schema version and a key (the columns that
// identify a row; rows are written sorted by it, and spade diff matches rows
// by it). The table reference with every column is docs/tables.md.
//
// Conventions: counts and rounds are int64; times are not stored in rows
// (wall-clock measurements would break byte-identical outputs; see
// docs/determinism.md); optional columns are pointers tagged "optional", so a
// zero value stays non-NULL and only an absent value is NULL; JSON-shaped
// payloads (prompts, requests) are strings of canonical JSON.
package schemas

// Slot is one environment slot of a regeneration (SPADE.md steps 1-2):
// the skill it targets, the setting, and its grounding documents.
// Table "slots", key slot_id.
type Slot struct {
	// SlotID is "r<round 6 digits>-s<index 4 digits>", unique in a run.
	SlotID string `parquet:"slot_id" json:"slot_id"`
	// Regeneration counts regenerations from 0 (round 1 is regeneration 0).
	Regeneration int64 `parquet:"regeneration" json:"regeneration"`
	// Index is the slot's position in the regeneration, from 0.
	Index int64 `parquet:"index" json:"index"`
	// Skill is one of the six skills of the curriculum (stages/sample).
	Skill string `parquet:"skill" json:"skill"`
	// Setting is "game" or "tool_use".
	Setting string `parquet:"setting" json:"setting"`
	// Kind is the prompt template: reasoning, game, grounded or tooluse.
	Kind string `parquet:"kind" json:"kind"`
	// DocIDs are the grounding documents' ids (corpus.doc_id), in order.
	DocIDs []string `parquet:"doc_ids,optional,list" json:"doc_ids"`
	// Domains are the grounding documents' domains, parallel to DocIDs.
	Domains []string `parquet:"domains,optional,list" json:"domains"`
	// DocRows are the documents' row indexes in the corpus table (part
	// order), so later stages read just those rows.
	DocRows []int64 `parquet:"doc_rows,optional,list" json:"doc_rows"`
	// Seed is the slot's generation seed, derived from (run seed, round, index).
	Seed int64 `parquet:"seed" json:"seed"`
}

// Design is one generation attempt (SPADE.md step 3). Table "designs",
// key (slot_id, attempt).
type Design struct {
	SlotID  string `parquet:"slot_id" json:"slot_id"`
	Attempt int64  `parquet:"attempt" json:"attempt"`
	Skill   string `parquet:"skill" json:"skill"`
	Setting string `parquet:"setting" json:"setting"`
	Kind    string `parquet:"kind" json:"kind"`
	// Model is the backend name (model.Backend.Name).
	Model string `parquet:"model" json:"model"`
	// Prompt is the chat messages sent, as canonical JSON.
	Prompt   string `parquet:"prompt,zstd" json:"prompt"`
	Response string `parquet:"response,zstd" json:"response"`
	// Source is the Python code extracted from Response ("" if none).
	Source string `parquet:"source,zstd" json:"source"`
	// EnvID is the first 16 hex of sha256 of the normalised source ("" if none).
	EnvID            string `parquet:"env_id" json:"env_id"`
	PromptTokens     int64  `parquet:"prompt_tokens" json:"prompt_tokens"`
	CompletionTokens int64  `parquet:"completion_tokens" json:"completion_tokens"`
	FinishReason     string `parquet:"finish_reason" json:"finish_reason"`
	// Error says why the attempt failed (model error, no code, quick check);
	// "" when it passed the quick checks.
	Error string `parquet:"error" json:"error"`
	// Final marks the slot's last attempt (the one validate considers).
	Final bool `parquet:"final" json:"final"`
}

// Validation is one check of one candidate environment (SPADE.md step 4).
// Table "validations", key (env_id, seq).
type Validation struct {
	EnvID  string `parquet:"env_id" json:"env_id"`
	SlotID string `parquet:"slot_id" json:"slot_id"`
	// Seq orders the checks of one environment as they ran, from 0.
	Seq    int64  `parquet:"seq" json:"seq"`
	Check  string `parquet:"check" json:"check"`
	Passed bool   `parquet:"passed" json:"passed"`
	Detail string `parquet:"detail" json:"detail"`
	// TracebackTail is the last lines of a Python traceback, if any.
	TracebackTail string `parquet:"traceback_tail" json:"traceback_tail"`
	// MS is the check's duration in milliseconds; NULL unless the run
	// records timings (observe.timings), since it is not reproducible.
	MS *int64 `parquet:"ms,optional" json:"ms,omitempty"`
}

// Environment is one candidate environment after validation: one row per
// slot whose final attempt produced code. Table "environments", key env_id
// (a slot whose final source repeats another slot's keeps the first slot).
type Environment struct {
	EnvID   string   `parquet:"env_id" json:"env_id"`
	SlotID  string   `parquet:"slot_id" json:"slot_id"`
	Skill   string   `parquet:"skill" json:"skill"`
	Setting string   `parquet:"setting" json:"setting"`
	Kind    string   `parquet:"kind" json:"kind"`
	DocIDs  []string `parquet:"doc_ids,optional,list" json:"doc_ids"`
	Source  string   `parquet:"source,zstd" json:"source"`
	// Valid is true when every validation check passed.
	Valid bool `parquet:"valid" json:"valid"`
	// Reason names the first failed check ("" when valid).
	Reason string `parquet:"reason" json:"reason"`
	// Name, MaxTurns, RewardLow/High and Tools are read from the class by
	// validation (Tools: JSON list of tool declarations, "" for games).
	Name       string  `parquet:"name" json:"name"`
	EnvKind    string  `parquet:"env_kind" json:"env_kind"`
	MaxTurns   int64   `parquet:"max_turns" json:"max_turns"`
	RewardLow  float64 `parquet:"reward_low" json:"reward_low"`
	RewardHigh float64 `parquet:"reward_high" json:"reward_high"`
	Tools      string  `parquet:"tools" json:"tools"`
}

// Hint is the privileged hint for one environment (SPADE.md step 5).
// Table "hints", key env_id.
type Hint struct {
	EnvID    string `parquet:"env_id" json:"env_id"`
	Hint     string `parquet:"hint" json:"hint"`
	Model    string `parquet:"model" json:"model"`
	Prompt   string `parquet:"prompt,zstd" json:"prompt"`
	Response string `parquet:"response,zstd" json:"response"`
	Error    string `parquet:"error" json:"error"`
}

// Message is one chat message stored in a list column.
type Message struct {
	Role    string `parquet:"role" json:"role"`
	Content string `parquet:"content" json:"content"`
	// ToolCalls is the assistant's tool calls as JSON ("" when none).
	ToolCalls  string `parquet:"tool_calls" json:"tool_calls,omitempty"`
	ToolCallID string `parquet:"tool_call_id" json:"tool_call_id,omitempty"`
}

// Rollout is one play of one environment (SPADE.md step 6).
// Table "rollouts", key (env_id, hinted, sample).
type Rollout struct {
	EnvID  string `parquet:"env_id" json:"env_id"`
	Hinted bool   `parquet:"hinted" json:"hinted"`
	Sample int64  `parquet:"sample" json:"sample"`
	// Seed is the reset seed, derived from (run seed, round, env, arm, sample).
	Seed     int64     `parquet:"seed" json:"seed"`
	Messages []Message `parquet:"messages,optional,list" json:"messages"`
	Actions  []string  `parquet:"actions,optional,list" json:"actions"`
	// StepRewards holds the reward of each step, in order.
	StepRewards []float64 `parquet:"step_rewards,optional,list" json:"step_rewards"`
	Return      float64   `parquet:"return" json:"return"`
	Turns       int64     `parquet:"turns" json:"turns"`
	Terminated  bool      `parquet:"terminated" json:"terminated"`
	Truncated   bool      `parquet:"truncated" json:"truncated"`
	// Success is the play's win: info["success"] on the last step when the
	// environment reports it, else Return > 0 (docs/regret.md).
	Success bool `parquet:"success" json:"success"`
	// Error records an environment or agent failure ("" when none).
	Error string `parquet:"error" json:"error"`
}

// Label is the per-environment outcome of a round (SPADE.md step 6).
// Table "labels", key env_id.
type Label struct {
	EnvID  string `parquet:"env_id" json:"env_id"`
	SlotID string `parquet:"slot_id" json:"slot_id"`
	Skill  string `parquet:"skill" json:"skill"`
	Valid  bool   `parquet:"valid" json:"valid"`
	Plays  int64  `parquet:"plays" json:"plays"`
	Errors int64  `parquet:"errors" json:"errors"`
	// UnhintedMean and HintedMean are mean returns; HintedMean is NULL on
	// rounds without hinted plays.
	UnhintedMean float64  `parquet:"unhinted_mean" json:"unhinted_mean"`
	HintedMean   *float64 `parquet:"hinted_mean,optional" json:"hinted_mean,omitempty"`
	// WinRate is the share of unhinted plays that succeeded.
	WinRate float64 `parquet:"win_rate" json:"win_rate"`
	// Regret = HintedMean - UnhintedMean; NULL without hinted plays.
	Regret    *float64 `parquet:"regret,optional" json:"regret,omitempty"`
	Learnable bool     `parquet:"learnable" json:"learnable"`
	Admitted  bool     `parquet:"admitted" json:"admitted"`
	// DesignerReward is in [-1, 1] (docs/regret.md); NULL off regeneration rounds.
	DesignerReward *float64 `parquet:"designer_reward,optional" json:"designer_reward,omitempty"`
}

// MemoryEntry is one environment remembered across regenerations
// (SPADE.md step 7). Table "memory", key seq.
type MemoryEntry struct {
	// Seq is the insertion number in the run, from 0; eviction drops the lowest.
	Seq        int64   `parquet:"seq" json:"seq"`
	EnvID      string  `parquet:"env_id" json:"env_id"`
	Skill      string  `parquet:"skill" json:"skill"`
	Family     string  `parquet:"family" json:"family"`
	Difficulty int64   `parquet:"difficulty" json:"difficulty"`
	Regret     float64 `parquet:"regret" json:"regret"`
	WinRate    float64 `parquet:"win_rate" json:"win_rate"`
	AddedRound int64   `parquet:"added_round" json:"added_round"`
	Summary    string  `parquet:"summary" json:"summary"`
	Excerpt    string  `parquet:"excerpt" json:"excerpt"`
}

// PoolEnv is one environment of the training pool (SPADE.md step 8).
// Table "pool", key env_id.
type PoolEnv struct {
	EnvID         string `parquet:"env_id" json:"env_id"`
	SlotID        string `parquet:"slot_id" json:"slot_id"`
	Skill         string `parquet:"skill" json:"skill"`
	Setting       string `parquet:"setting" json:"setting"`
	Kind          string `parquet:"kind" json:"kind"`
	Source        string `parquet:"source,zstd" json:"source"`
	Hint          string `parquet:"hint" json:"hint"`
	MaxTurns      int64  `parquet:"max_turns" json:"max_turns"`
	Tools         string `parquet:"tools" json:"tools"`
	AdmittedRound int64  `parquet:"admitted_round" json:"admitted_round"`
}

// TrainSample is one GRPO sample (SPADE.md step 8). Table "train_batch",
// key sample_id.
type TrainSample struct {
	SampleID string `parquet:"sample_id" json:"sample_id"`
	// Role is "agent" or "designer".
	Role string `parquet:"role" json:"role"`
	// Group is the GRPO group: the env_id for agent samples, the skill for
	// designer samples.
	Group     string    `parquet:"group" json:"group"`
	Messages  []Message `parquet:"messages,optional,list" json:"messages"`
	Reward    float64   `parquet:"reward" json:"reward"`
	Advantage float64   `parquet:"advantage" json:"advantage"`
	Weight    float64   `parquet:"weight" json:"weight"`
	// MaskSource says which tokens train: "assistant_turns" (agent) or
	// "last_assistant" (designer response).
	MaskSource string `parquet:"mask_source" json:"mask_source"`
}

// TrainMetric is one metric of the trainer. Table "train_metrics", key
// (step, name).
type TrainMetric struct {
	Step  int64   `parquet:"step" json:"step"`
	Name  string  `parquet:"name" json:"name"`
	Value float64 `parquet:"value" json:"value"`
}

// CheckpointFile is one file of a checkpoint.
type CheckpointFile struct {
	Name   string `parquet:"name" json:"name"`
	Key    string `parquet:"key" json:"key"`
	SHA256 string `parquet:"sha256" json:"sha256"`
	Bytes  int64  `parquet:"bytes" json:"bytes"`
}

// Checkpoint registers the model a round produced (or used).
// Table "checkpoints", key checkpoint_id.
type Checkpoint struct {
	// CheckpointID is a digest of the files, or "base" for the initial model.
	CheckpointID string `parquet:"checkpoint_id" json:"checkpoint_id"`
	// TrainedRound is the round whose GRPO step made it (0 for the base).
	TrainedRound int64            `parquet:"trained_round" json:"trained_round"`
	Parent       string           `parquet:"parent" json:"parent"`
	Trainer      string           `parquet:"trainer" json:"trainer"`
	Files        []CheckpointFile `parquet:"files,optional,list" json:"files"`
}

// Metric is one round-level metric (SPADE.md "Metrics"). Table "metrics",
// key (name, skill).
type Metric struct {
	Name string `parquet:"name" json:"name"`
	// Skill scopes a per-skill metric ("" for round-wide ones).
	Skill string  `parquet:"skill" json:"skill"`
	Value float64 `parquet:"value" json:"value"`
}

// LLMCall is one recorded model call. Table "llm_calls", key
// (request_hash, occurrence).
type LLMCall struct {
	RequestHash string `parquet:"request_hash" json:"request_hash"`
	// Occurrence numbers identical requests of one stage from 0.
	Occurrence int64  `parquet:"occurrence" json:"occurrence"`
	Stage      string `parquet:"stage" json:"stage"`
	Backend    string `parquet:"backend" json:"backend"`
	Request    string `parquet:"request,zstd" json:"request"`
	Response   string `parquet:"response,zstd" json:"response"`
	Error      string `parquet:"error" json:"error"`
	// LatencyMS is NULL unless the run records timings.
	LatencyMS *int64 `parquet:"latency_ms,optional" json:"latency_ms,omitempty"`
}
