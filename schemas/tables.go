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

// Slot is one environment slot of a regeneration (docs/method.md steps 1-2):
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

// Design is one generation attempt (docs/method.md step 3). Table "designs",
// key (slot_id, attempt).
type Design struct {
	// SlotID is the slot the attempt is for (slots.slot_id).
	SlotID string `parquet:"slot_id" json:"slot_id"`
	// Attempt numbers the slot's attempts from 0; there are at most
	// design.max_attempts of them (paper: 5).
	Attempt int64 `parquet:"attempt" json:"attempt"`
	// Skill is copied from the slot.
	Skill string `parquet:"skill" json:"skill"`
	// Setting is copied from the slot: "game" or "tool_use".
	Setting string `parquet:"setting" json:"setting"`
	// Kind is copied from the slot: reasoning, game, grounded or tooluse.
	Kind string `parquet:"kind" json:"kind"`
	// Model is the backend name (model.Backend.Name).
	Model string `parquet:"model" json:"model"`
	// CheckpointID is the policy that answered the call (docs/design.md "The
	// policy of a round"): the checkpoint id served in managed and reload
	// serving (checkpoints.checkpoint_id of round r-1, or "base:<path>"),
	// "fixed:<model.name>" for a fixed server, "procedural" for the
	// offline model.
	CheckpointID string `parquet:"checkpoint_id" json:"checkpoint_id"`
	// Prompt is the chat messages sent, as canonical JSON.
	Prompt string `parquet:"prompt,zstd" json:"prompt"`
	// Response is the model's answer text ("" when the prompt could not be
	// rendered or the model call failed).
	Response string `parquet:"response,zstd" json:"response"`
	// Source is the Python code extracted from Response ("" if none).
	Source string `parquet:"source,zstd" json:"source"`
	// EnvID is the first 16 hex of sha256 of the normalised source ("" if none).
	EnvID string `parquet:"env_id" json:"env_id"`
	// PromptTokens is the prompt's usage the backend reported, in tokens
	// (the procedural backend counts whitespace-separated words); 0 when
	// the call failed.
	PromptTokens int64 `parquet:"prompt_tokens" json:"prompt_tokens"`
	// CompletionTokens is the completion's usage in tokens, counted as
	// PromptTokens is.
	CompletionTokens int64 `parquet:"completion_tokens" json:"completion_tokens"`
	// FinishReason is the backend's finish reason ("stop", "length",
	// "tool_calls", ...); "" when the call failed. An answer cut at
	// design.max_tokens ("length") is retried with feedback saying so.
	FinishReason string `parquet:"finish_reason" json:"finish_reason"`
	// Reasoning is the designer's reasoning: the server's
	// reasoning_content and the <think> blocks of Response
	// (model.ReplyParts); code is extracted from Response without them.
	Reasoning string `parquet:"reasoning,zstd" json:"reasoning"`
	// PromptTokenIDs are the server's rendering of the design prompt
	// (its chat template, tokenized); empty when it reported none
	// (docs/tables.md "Token ids").
	PromptTokenIDs []int64 `parquet:"prompt_token_ids,optional,list" json:"prompt_token_ids,omitempty"`
	// CompletionTokenIDs are the token ids the server sampled for
	// Response, in order; empty when it reported none.
	CompletionTokenIDs []int64 `parquet:"completion_token_ids,optional,list" json:"completion_token_ids,omitempty"`
	// CompletionLogprobs are the sampler's log-probs of
	// CompletionTokenIDs, parallel; empty when it reported none.
	CompletionLogprobs []float64 `parquet:"completion_logprobs,optional,list" json:"completion_logprobs,omitempty"`
	// Error says why the attempt failed (model error, no code, quick check);
	// "" when it passed the quick checks.
	Error string `parquet:"error" json:"error"`
	// Final marks the slot's last attempt (the one validate considers).
	Final bool `parquet:"final" json:"final"`
}

// Validation is one check of one candidate environment (docs/method.md step 4).
// Table "validations", key (env_id, seq).
type Validation struct {
	// EnvID is the candidate environment (designs.env_id).
	EnvID string `parquet:"env_id" json:"env_id"`
	// SlotID is the candidate's slot.
	SlotID string `parquet:"slot_id" json:"slot_id"`
	// Seq orders the checks of one environment as they ran, from 0.
	Seq int64 `parquet:"seq" json:"seq"`
	// Check is the check's name, one of the envcheck.Check* constants
	// (compile, class, metadata, reset, ...; docs/environment-contract.md).
	Check string `parquet:"check" json:"check"`
	// Passed is true when the check ran and held; false when it failed or
	// was skipped.
	Passed bool `parquet:"passed" json:"passed"`
	// Skipped is true when the check did not run because an earlier check
	// failed (Passed is then false too); a failure is Passed and Skipped
	// both false.
	Skipped bool `parquet:"skipped" json:"skipped"`
	// Detail says what was seen: the failure (seed, action, error kind) or
	// a summary of the pass.
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
	// EnvID is the hash of the source (see Design.EnvID).
	EnvID string `parquet:"env_id" json:"env_id"`
	// SlotID is the slot whose final attempt produced the source.
	SlotID string `parquet:"slot_id" json:"slot_id"`
	// Skill is copied from the slot.
	Skill string `parquet:"skill" json:"skill"`
	// Setting is copied from the slot: "game" or "tool_use".
	Setting string `parquet:"setting" json:"setting"`
	// Kind is copied from the slot: reasoning, game, grounded or tooluse.
	Kind string `parquet:"kind" json:"kind"`
	// DocIDs are the slot's grounding documents (corpus.doc_id), in order.
	DocIDs []string `parquet:"doc_ids,optional,list" json:"doc_ids"`
	// Source is the environment's normalised Python source.
	Source string `parquet:"source,zstd" json:"source"`
	// Valid is true when every validation check passed.
	Valid bool `parquet:"valid" json:"valid"`
	// Reason names the first failed check ("" when valid), or is
	// envcheck.ReasonTimeout ("timeout") when the validation's time limit
	// ran out first.
	Reason string `parquet:"reason" json:"reason"`
	// Name, EnvKind, MaxTurns, RewardLow/High and Tools are read from the
	// class by validation. Name is the class's name attribute (at most 200
	// bytes; "" when the program did not load).
	Name string `parquet:"name" json:"name"`
	// EnvKind is the kind the class declares: "tool_use" for subclasses of
	// spade_env.ToolUseEnv, else "game"; "" when no class was found.
	EnvKind string `parquet:"env_kind" json:"env_kind"`
	// MaxTurns is the class's turn limit; 0 when missing or not an int
	// (rollouts then use rollout.max_turns alone).
	MaxTurns int64 `parquet:"max_turns" json:"max_turns"`
	// RewardLow is the lower bound of the class's declared reward_range; 0
	// (and RewardHigh 1) when the range is missing or the environment is
	// invalid. The range's width scales the designer reward (docs/regret.md).
	RewardLow float64 `parquet:"reward_low" json:"reward_low"`
	// RewardHigh is the upper bound of the declared reward_range (1 by
	// default, see RewardLow).
	RewardHigh float64 `parquet:"reward_high" json:"reward_high"`
	// Tools is the tool-use class's tools attribute as compact JSON ("null"
	// when the class sets it to None); "" for games and when no class was
	// found. It is non-empty exactly when EnvKind is "tool_use", which is
	// how rollouts tell a tool-use environment in the pool (PoolEnv has no
	// EnvKind).
	Tools string `parquet:"tools" json:"tools"`
}

// Hint is the privileged hint for one environment (docs/method.md step 5).
// Table "hints", key env_id.
type Hint struct {
	// EnvID is the environment; only valid environments get a hint.
	EnvID string `parquet:"env_id" json:"env_id"`
	// Hint is the text the agent sees in the hinted arm: Response trimmed
	// and cut to at most 4000 bytes (hint.MaxHintBytes); "" on error.
	Hint string `parquet:"hint" json:"hint"`
	// Model is the backend name (model.Backend.Name).
	Model string `parquet:"model" json:"model"`
	// CheckpointID is the policy that answered the call (docs/design.md "The
	// policy of a round"): the checkpoint id served in managed and reload
	// serving (checkpoints.checkpoint_id of round r-1, or "base:<path>"),
	// "fixed:<model.name>" for a fixed server, "procedural" for the
	// offline model.
	CheckpointID string `parquet:"checkpoint_id" json:"checkpoint_id"`
	// Prompt is the chat messages sent, as canonical JSON; the hint writer
	// reads the environment's source. "" when rendering failed.
	Prompt string `parquet:"prompt,zstd" json:"prompt"`
	// Response is the model's raw answer ("" on error).
	Response string `parquet:"response,zstd" json:"response"`
	// Reasoning is the hint writer's reasoning (the server's
	// reasoning_content and the <think> blocks of Response), kept out of
	// Hint.
	Reasoning string `parquet:"reasoning,zstd" json:"reasoning"`
	// FinishReason is the call's finish_reason ("" when it failed); a hint
	// cut at hint.max_tokens ("length") is an error.
	FinishReason string `parquet:"finish_reason" json:"finish_reason"`
	// Error says why no hint was written ("prompt: ...", "model: ...",
	// including "model: cut at hint.max_tokens"); "" when none.
	Error string `parquet:"error" json:"error"`
}

// Message is one chat message stored in a list column. It is one of
// three message types, kept apart on purpose: this one is the table
// layout (its Parquet columns and JSON are pinned by the tables' golden
// digests), so tool calls are one JSON text column and prompt token ids
// are delta-coded against the previous turn. model.Message is the
// backend interface's (structured tool calls, no token ids: those come
// with the Choice), and grpo.Message the trainer's batch file (OpenAI's
// nested tool_calls, whole prompt ids, the reasoning rendered into
// Content). The roles are model.RoleSystem, RoleUser, RoleAssistant and
// RoleTool. stages/rollout writes it from a model.Message; stages/grpo
// reads it into a grpo.Message.
type Message struct {
	// Role is the OpenAI chat role: "system", "user", "assistant" or
	// "tool".
	Role string `parquet:"role" json:"role"`
	// Content is the message text (an observation, a prompt; for an
	// assistant turn of a play the reply without its reasoning).
	Content string `parquet:"content" json:"content"`
	// Reasoning is an assistant message's reasoning (the server's
	// reasoning_content and the reply's <think> blocks); "" for other
	// roles and where none was sent. In train_batch it is "": the trained
	// text is Content, rendered per grpo.train_reasoning.
	Reasoning string `parquet:"reasoning" json:"reasoning,omitempty"`
	// ToolCalls is the assistant's tool calls as JSON ("" when none).
	ToolCalls string `parquet:"tool_calls" json:"tool_calls,omitempty"`
	// ToolCallID links a "tool" message to the call it answers ("" for
	// other roles).
	ToolCallID string `parquet:"tool_call_id" json:"tool_call_id,omitempty"`
	// PromptTokens is the prompt length in tokens the server reported
	// (usage.prompt_tokens) for the call that produced this assistant
	// turn; 0 for other messages and where the server reported none.
	PromptTokens int64 `parquet:"prompt_tokens" json:"prompt_tokens,omitempty"`
	// PromptShared and PromptTokenIDs are the server's rendering of that
	// call's prompt (its chat template, tokenized), delta-coded against
	// the previous assistant turn of the same chat: the prompt is the
	// first PromptShared tokens of (previous turn's prompt ++ its
	// CompletionTokenIDs), then PromptTokenIDs. The first assistant turn
	// has PromptShared 0 and its whole prompt in PromptTokenIDs. Both are
	// empty when the server reported no prompt ids (docs/tables.md
	// "Token ids", schemas.ExpandPrompts).
	PromptShared int64 `parquet:"prompt_shared" json:"prompt_shared,omitempty"`
	// PromptTokenIDs: see PromptShared.
	PromptTokenIDs []int64 `parquet:"prompt_token_ids,optional,list" json:"prompt_token_ids,omitempty"`
	// CompletionTokenIDs are the token ids the server sampled for this
	// assistant turn, in order (model.Tokens); empty when it reported none.
	CompletionTokenIDs []int64 `parquet:"completion_token_ids,optional,list" json:"completion_token_ids,omitempty"`
	// CompletionLogprobs are the sampler's log-probs (natural log) of
	// CompletionTokenIDs, parallel; empty when it reported none.
	CompletionLogprobs []float64 `parquet:"completion_logprobs,optional,list" json:"completion_logprobs,omitempty"`
}

// Termination values of a play (Rollout.Termination), written by the
// rollout stage and read by the report's reply summary
// (stages/roundmetrics ReplyStats).
const (
	// TerminationTerminated: the environment ended the episode (terminated).
	TerminationTerminated = "terminated"
	// TerminationTruncated: the environment truncated the episode.
	TerminationTruncated = "truncated"
	// TerminationMaxTurns: the harness stopped at the turn limit, the smaller of
	// the environment's max_turns and rollout.max_turns.
	TerminationMaxTurns = "max_turns"
	// TerminationMaxContext: a turn's prompt and completion reached
	// rollout.max_context_tokens.
	TerminationMaxContext = "max_context"
	// TerminationAgentCut: the agent's reply was cut at rollout.max_tokens
	// (finish_reason "length"); it was not stepped.
	TerminationAgentCut = "agent_cut"
	// TerminationError: the environment or the agent call failed (Error says how).
	TerminationError = "error"
)

// Rollout is one play of one environment (docs/method.md step 6).
// Table "rollouts", key (env_id, hinted, sample).
type Rollout struct {
	// EnvID is the environment played.
	EnvID string `parquet:"env_id" json:"env_id"`
	// Hinted is true in the hinted arm (the agent's system prompt carries
	// the hint); only regeneration rounds have hinted plays.
	Hinted bool `parquet:"hinted" json:"hinted"`
	// Sample is the play's index in its arm, 0..G-1 (G =
	// rollout.group_size).
	Sample int64 `parquet:"sample" json:"sample"`
	// Seed is the reset seed, derived from (run seed, round, env, arm, sample).
	Seed int64 `parquet:"seed" json:"seed"`
	// Messages is the agent's chat: system prompt, first observation, then
	// per turn the assistant message and the observation (a "tool" message
	// for a tool call). NULL when the environment failed to load or reset.
	Messages []Message `parquet:"messages,optional,list" json:"messages"`
	// Actions are the action texts passed to step, one per stepped agent
	// turn (a tool call as {"name", "arguments"} JSON), as extracted from
	// the reply by rollout.action_format; when a step failed, its action
	// is the last one.
	Actions []string `parquet:"actions,optional,list" json:"actions"`
	// Replies are the agent's replies as the server sent their content
	// (reasoning blocks included), one per answered agent call, stepped
	// or not.
	Replies []string `parquet:"replies,optional,list" json:"replies"`
	// FinishReasons are the finish_reason of each answered agent call,
	// parallel to Replies.
	FinishReasons []string `parquet:"finish_reasons,optional,list" json:"finish_reasons"`
	// Tools is the JSON list of the tools the play declared to the model,
	// in OpenAI's format ([{"type": "function", "function": {"name",
	// "description", "parameters"}}]); "" for a play without tools.
	Tools string `parquet:"tools" json:"tools"`
	// Unextracted counts the stepped turns whose reply held no action in
	// rollout.action_format (stepped as they were, so the environment gave
	// its feedback).
	Unextracted int64 `parquet:"unextracted" json:"unextracted"`
	// Termination says how the play ended: "terminated" or "truncated"
	// (the environment's flags), "max_turns" (the turn limit),
	// "max_context" (rollout.max_context_tokens), "agent_cut" (a reply
	// cut at rollout.max_tokens), "error" (Error says which).
	Termination string `parquet:"termination" json:"termination"`
	// StepRewards holds the reward of each step, in order.
	StepRewards []float64 `parquet:"step_rewards,optional,list" json:"step_rewards"`
	// Return is the sum of StepRewards: the return so far when the play
	// failed.
	Return float64 `parquet:"return" json:"return"`
	// Turns counts the steps that succeeded.
	Turns int64 `parquet:"turns" json:"turns"`
	// Terminated is the last step's Gymnasium terminated flag.
	Terminated bool `parquet:"terminated" json:"terminated"`
	// Truncated is the last step's Gymnasium truncated flag, also set when
	// the turn limit (the smaller of the environment's and
	// rollout.max_turns) ended the play; false after an error.
	Truncated bool `parquet:"truncated" json:"truncated"`
	// Success is the play's win: info["success"] on the last step when the
	// environment reports it, else Return > 0, except that a play the
	// harness cut (max_turns, max_context) without a report is a loss
	// (docs/regret.md).
	Success bool `parquet:"success" json:"success"`
	// CheckpointID is the policy that played (the agent's calls) (docs/design.md "The
	// policy of a round"): the checkpoint id served in managed and reload
	// serving (checkpoints.checkpoint_id of round r-1, or "base:<path>"),
	// "fixed:<model.name>" for a fixed server, "procedural" for the
	// offline model.
	CheckpointID string `parquet:"checkpoint_id" json:"checkpoint_id"`
	// Error records an environment or agent failure ("" when none).
	Error string `parquet:"error" json:"error"`
}

// Label is the per-environment outcome of a round (docs/method.md step 6).
// Table "labels", key env_id.
type Label struct {
	// EnvID is the environment labelled.
	EnvID string `parquet:"env_id" json:"env_id"`
	// SlotID is the environment's slot.
	SlotID string `parquet:"slot_id" json:"slot_id"`
	// Skill is the environment's skill.
	Skill string `parquet:"skill" json:"skill"`
	// Valid is true when the environment passed validation (always true for
	// pool environments, labelled between regenerations).
	Valid bool `parquet:"valid" json:"valid"`
	// Plays counts the plays of both arms, failed ones included.
	Plays int64 `parquet:"plays" json:"plays"`
	// Errors counts the plays with a non-empty Rollout.Error.
	Errors int64 `parquet:"errors" json:"errors"`
	// UnhintedMean is the mean return of the unhinted plays (0 without
	// plays).
	UnhintedMean float64 `parquet:"unhinted_mean" json:"unhinted_mean"`
	// HintedMean is the mean return of the hinted plays; NULL on rounds
	// without hinted plays (off regeneration rounds).
	HintedMean *float64 `parquet:"hinted_mean,optional" json:"hinted_mean,omitempty"`
	// WinRate is the share of unhinted plays that succeeded.
	WinRate float64 `parquet:"win_rate" json:"win_rate"`
	// Regret = HintedMean - UnhintedMean; NULL without hinted plays.
	Regret *float64 `parquet:"regret,optional" json:"regret,omitempty"`
	// Learnable is true when the environment is valid, has unhinted plays,
	// and label.band_low <= WinRate <= label.band_high (docs/method.md step 6).
	Learnable bool `parquet:"learnable" json:"learnable"`
	// Admitted says the environment is in the training pool: Learnable on
	// regeneration rounds, Valid (so always true) between them.
	Admitted bool `parquet:"admitted" json:"admitted"`
	// DesignerReward is in [-1, 1] (docs/regret.md); NULL off regeneration
	// rounds and for a valid environment without hinted plays (no hint).
	DesignerReward *float64 `parquet:"designer_reward,optional" json:"designer_reward,omitempty"`
}

// MemoryEntry is one environment remembered across regenerations
// (docs/method.md step 7). Table "memory", key seq.
type MemoryEntry struct {
	// Seq is the insertion number in the run, from 0; eviction drops the lowest.
	Seq int64 `parquet:"seq" json:"seq"`
	// EnvID is the remembered environment.
	EnvID string `parquet:"env_id" json:"env_id"`
	// Skill is the environment's skill; designer prompts draw seeds of the
	// slot's skill.
	Skill string `parquet:"skill" json:"skill"`
	// Family is the procedural marker's family, else the class's name
	// attribute ("" when neither is found).
	Family string `parquet:"family" json:"family"`
	// Difficulty is the procedural marker's difficulty (1..5), 0 when
	// unknown.
	Difficulty int64 `parquet:"difficulty" json:"difficulty"`
	// Regret is the environment's regret when it was labelled.
	Regret float64 `parquet:"regret" json:"regret"`
	// WinRate is the environment's unhinted win rate when it was labelled,
	// in [0, 1].
	WinRate float64 `parquet:"win_rate" json:"win_rate"`
	// AddedRound is the regeneration round that added the entry.
	AddedRound int64 `parquet:"added_round" json:"added_round"`
	// Summary is one line for prompts: the class's name, "(skill)" and the
	// docstring (at most 200 bytes of it).
	Summary string `parquet:"summary" json:"summary"`
	// Excerpt is the first 1200 bytes of the source (memory.ExcerptBytes),
	// cut on a UTF-8 character boundary.
	Excerpt string `parquet:"excerpt" json:"excerpt"`
}

// PoolEnv is one environment of the training pool (docs/method.md step 8).
// Table "pool", key env_id.
type PoolEnv struct {
	// EnvID is the admitted environment.
	EnvID string `parquet:"env_id" json:"env_id"`
	// SlotID is the environment's slot.
	SlotID string `parquet:"slot_id" json:"slot_id"`
	// Skill is the environment's skill.
	Skill string `parquet:"skill" json:"skill"`
	// Setting is "game" or "tool_use", from the slot.
	Setting string `parquet:"setting" json:"setting"`
	// Kind is the slot's prompt template: reasoning, game, grounded or
	// tooluse.
	Kind string `parquet:"kind" json:"kind"`
	// Source is the environment's Python source.
	Source string `parquet:"source,zstd" json:"source"`
	// Hint is the environment's hint ("" when it has none); pool
	// environments are played unhinted.
	Hint string `parquet:"hint" json:"hint"`
	// MaxTurns is the class's turn limit (0 when it declares none).
	MaxTurns int64 `parquet:"max_turns" json:"max_turns"`
	// Tools is the environment's tools column (Environment.Tools):
	// non-empty exactly for tool-use environments, which rollouts play
	// with tool calls whatever Setting says.
	Tools string `parquet:"tools" json:"tools"`
	// AdmittedRound is the regeneration round that admitted it.
	AdmittedRound int64 `parquet:"admitted_round" json:"admitted_round"`
}

// TrainSample is one GRPO sample (docs/method.md step 8). Table "train_batch",
// key sample_id.
type TrainSample struct {
	// SampleID is "agent-<env_id>-<sample, 4 digits>" or
	// "designer-<slot_id>-<attempt>".
	SampleID string `parquet:"sample_id" json:"sample_id"`
	// Role is "agent" or "designer".
	Role string `parquet:"role" json:"role"`
	// Group is the GRPO group: the env_id for agent samples, the skill for
	// designer samples.
	Group string `parquet:"group" json:"group"`
	// Messages is the sequence to train: the unhinted play's chat (agent;
	// a play without an assistant message is not a sample), or the design
	// prompt plus the response as an assistant message (designer).
	Messages []Message `parquet:"messages,optional,list" json:"messages"`
	// Tools is the play's rollouts.tools (agent samples of tool-use
	// plays; "" otherwise): the trainer renders the chat with them
	// declared, as the server did.
	Tools string `parquet:"tools" json:"tools"`
	// Reward is the play's return (agent); for a designer sample the
	// label's designer reward for a slot's final attempt (-1 when no
	// label names its slot), -1 for every earlier attempt.
	Reward float64 `parquet:"reward" json:"reward"`
	// Advantage is (r - group mean) / (group std + grpo.eps) for agent
	// samples (0 for zero-variance and singleton groups), r - skill mean
	// for designer samples (divided by the role std with designer_norm
	// std); docs/training.md.
	Advantage float64 `parquet:"advantage" json:"advantage"`
	// Weight scales the sample's policy-gradient term: 1 for agent
	// samples, the grpo.weight_rule value for designer samples.
	Weight float64 `parquet:"weight" json:"weight"`
	// MaskSource says which tokens train: "assistant_turns" (agent) or
	// "last_assistant" (designer response).
	MaskSource string `parquet:"mask_source" json:"mask_source"`
	// SampledRound is the round whose policy sampled the sequence: the
	// batch's own round for agent samples and, with grpo.designer_delay
	// d, round r-d for the designer samples that grpo(r) trains (their
	// policy was checkpoint(r-d-1): what a truncated importance-sampling
	// correction, not applied by the trainer yet, would weigh against;
	// docs/training.md "Designer delay").
	SampledRound int64 `parquet:"sampled_round" json:"sampled_round"`
}

// TrainMetric is one metric of the trainer. Table "train_metrics", key
// (step, name).
type TrainMetric struct {
	// Step is the trainer's inner step from 1; 0 for batch-level numbers
	// (agent_samples, zero_variance_groups, designer_weight, trained, ...).
	Step int64 `parquet:"step" json:"step"`
	// Name is the metric name (loss, kl, clip_fraction, grad_norm, tokens,
	// ...; docs/training.md "Metrics").
	Name string `parquet:"name" json:"name"`
	// Value is the metric's value, in the unit its name implies (tokens,
	// seconds, bytes, or a plain number).
	Value float64 `parquet:"value" json:"value"`
}

// CheckpointFile is one file of a checkpoint.
type CheckpointFile struct {
	// Name is the file's path in the checkpoint directory, slash-separated
	// (e.g. "model.safetensors").
	Name string `parquet:"name" json:"name"`
	// Key is the file's store key, under
	// <run>/round=NNNNNN/checkpoints/files/<checkpoint_id>/.
	Key string `parquet:"key" json:"key"`
	// SHA256 is the hex sha256 of the file, checked on every read.
	SHA256 string `parquet:"sha256" json:"sha256"`
	// Bytes is the file's size in bytes.
	Bytes int64 `parquet:"bytes" json:"bytes"`
}

// Checkpoint registers the model a round produced (or used).
// Table "checkpoints", key checkpoint_id.
type Checkpoint struct {
	// CheckpointID is the first 16 hex digits of a digest of the files, or
	// "base:<grpo.base_checkpoint>" for the initial model.
	CheckpointID string `parquet:"checkpoint_id" json:"checkpoint_id"`
	// TrainedRound is the round whose GRPO step made it (0 for the base).
	TrainedRound int64 `parquet:"trained_round" json:"trained_round"`
	// Parent is the CheckpointID it was trained from ("" for the base).
	Parent string `parquet:"parent" json:"parent"`
	// Trainer is grpo.trainer when it trained ("torch" or "command"), or
	// "base" for the untrained model.
	Trainer string `parquet:"trainer" json:"trainer"`
	// Files are the checkpoint's files (Hugging Face layout), verified by
	// sha256 on read; empty for the base, which is loaded from
	// grpo.base_checkpoint.
	Files []CheckpointFile `parquet:"files,optional,list" json:"files"`
}

// Metric is one round-level metric (docs/method.md "Metrics"). Table "metrics",
// key (name, skill).
type Metric struct {
	// Name is the metric name, e.g. learnable_fraction, win_rate,
	// regret_mean, vendi_per_n (docs/metrics.md).
	Name string `parquet:"name" json:"name"`
	// Skill scopes a per-skill metric ("" for round-wide ones).
	Skill string `parquet:"skill" json:"skill"`
	// Value is the metric's value (a count, a share in [0, 1], a mean).
	Value float64 `parquet:"value" json:"value"`
}

// Eval is one score of one checkpoint on one held-out task (docs/recipes.md
// "Evaluation"; the held-out benchmarks of docs/method.md "Settings and results"). Table "evals", key
// (suite, task, metric): the eval stage writes it in round r for
// checkpoint(r), and `spade eval --round R` writes the same rows outside
// the sealed rounds (<run>/evals/round=R/).
type Eval struct {
	// Round is R of checkpoint(R), the scored weights: those round R's
	// GRPO step wrote (or carried, with grpo.trainer none); 0 is the base
	// checkpoint (`spade eval --round 0`).
	Round int64 `parquet:"round" json:"round"`
	// CheckpointID is the served checkpoint (checkpoints.checkpoint_id,
	// "base:<path>" or "fixed:<model>" for a server spade does not
	// control).
	CheckpointID string `parquet:"checkpoint_id" json:"checkpoint_id"`
	// Suite is the harness: "reasoning_gym" or "lm_eval".
	Suite string `parquet:"suite" json:"suite"`
	// Task is the suite's task name (a reasoning-gym dataset, an
	// lm-evaluation-harness task).
	Task string `parquet:"task" json:"task"`
	// Metric is the score's name: for reasoning_gym accuracy (mean score
	// in [0, 1]), format_rate (share of answers inside answer tags) and
	// errors (failed requests, a count); for lm_eval the harness's
	// "metric,filter" (e.g. "exact_match,none").
	Metric string `parquet:"metric" json:"metric"`
	// Value is the score.
	Value float64 `parquet:"value" json:"value"`
	// N is the number of items scored.
	N int64 `parquet:"n" json:"n"`
	// Stderr is the standard error of the mean (reasoning_gym: sample
	// standard deviation / sqrt(n); lm_eval: the harness's bootstrap or
	// analytic stderr); 0 when n < 2 or the harness reports none.
	Stderr float64 `parquet:"stderr" json:"stderr"`
}

// LLMCall is one recorded model call. Table "llm_calls", key
// (request_hash, occurrence).
type LLMCall struct {
	// RequestHash is the hex sha256 of Request (replay.Canonical).
	RequestHash string `parquet:"request_hash" json:"request_hash"`
	// Occurrence numbers identical requests of one stage from 0.
	Occurrence int64 `parquet:"occurrence" json:"occurrence"`
	// Stage is the stage that made the call: "design", "hint" or
	// "rollout".
	Stage string `parquet:"stage" json:"stage"`
	// Backend is the backend name (model.Backend.Name).
	Backend string `parquet:"backend" json:"backend"`
	// CheckpointID is the policy that answered the call (docs/design.md "The
	// policy of a round"): the checkpoint id served in managed and reload
	// serving (checkpoints.checkpoint_id of round r-1, or "base:<path>"),
	// "fixed:<model.name>" for a fixed server, "procedural" for the
	// offline model.
	CheckpointID string `parquet:"checkpoint_id" json:"checkpoint_id"`
	// Request is the canonical JSON of the backend name and the request.
	Request string `parquet:"request,zstd" json:"request"`
	// Response is the JSON of the model.Response ("" when Error is set).
	Response string `parquet:"response,zstd" json:"response"`
	// Error is the call's error text ("" when none).
	Error string `parquet:"error" json:"error"`
	// LatencyMS is the wall-clock time of the backend's Chat call in
	// milliseconds (the backend's own retries included); NULL unless the
	// run records timings.
	LatencyMS *int64 `parquet:"latency_ms,optional" json:"latency_ms,omitempty"`
}
