// Package procedural is the offline model backend: a deterministic stand-in
// for an LLM (Name "procedural:v1") that plays every SPADE role the pipeline
// needs without a GPU or network (docs/method.md "The idea", docs/design.md "Model
// backends"). It is not a language model and says so in every source it
// writes. Same Request, same Response, byte for byte.
//
// The caller says what is asked through model.Request.Meta:
//
//	spade.task     "design" | "hint" | "agent"
//
// design (one environment per sample):
//
//	spade.kind     reasoning | game | grounded | tooluse
//	spade.skill    one of Skills
//	spade.setting  game | tool_use (tool_use or kind tooluse: a workflow)
//	spade.slot     slot id; its trailing number cycles the skill's families
//	spade.attempt  0..4; >= 1 with feedback gives a one-level simpler
//	               variant, >= 2 also moves to the next family
//	spade.doc      JSON []Document (grounding documents)
//	spade.memory   JSON []MemoryEntry of this skill (may be empty)
//	spade.feedback the previous attempt's failure (may be empty)
//
// The response is one sentence of prose and a ```python fence holding a
// complete environment on the spade_env contract (Env or ToolUseEnv),
// rendered from one of 12 text families (two per skill) or 3 tool-use
// workflows with text/template, woven from the documents' salient terms and
// numbers (never the document title). Each source carries a machine-readable
// line SPADE_PROCEDURAL = {"family", "difficulty", "version", "params"};
// FamilyOf reads it back. Difficulty 1..5 follows the learnable band
// [BandLow, BandHigh] of win rate, using the newest memory entry of the same
// family (DefaultDifficulty without one).
//
// hint: the source is Meta spade.source or the last user message. The hint
// is computed from the SPADE_PROCEDURAL parameters (nothing is executed);
// sources without the line get GenericHint. Hints never fail.
//
// agent: messages are the agent prompt (system; may carry "Hint: ..."),
// then alternating observations (user, or tool results) and actions
// (assistant). Meta spade.hint carries the hint ("" unhinted) and
// spade.seed the play seed (else Request.Seed). With Request.Tools the
// answer is one ToolCall or the text "done"; otherwise one action string.
// The agent is imperfect on purpose, in a way the seed controls (see
// persona), so win rates spread over the learnable band and hints help.
package procedural
