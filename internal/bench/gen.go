package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"unicode"

	"github.com/spade-pipeline/spade/datasets"
	"github.com/spade-pipeline/spade/schemas"
)

// Words is a unigram vocabulary for generated text: every word of the
// embedded corpus (datasets.Embedded), repeats kept so that frequent words
// stay frequent. Text drawn word by word from it compresses about as well
// as real prose (no long repeats for zstd to find), unlike copies of whole
// passages, which would flatter every codec.
type Words []string

// EmbeddedWords builds Words from the embedded corpus, in document order.
// Errors: the embedded corpus cannot be read.
func EmbeddedWords() (Words, error) {
	docs, err := datasets.Embedded()
	if err != nil {
		return nil, fmt.Errorf("vocabulary: %w", err)
	}
	var w Words
	for _, d := range docs {
		w = append(w, strings.FieldsFunc(d.Text, unicode.IsSpace)...)
	}
	if len(w) == 0 {
		return nil, fmt.Errorf("vocabulary: embedded corpus has no words")
	}
	return w, nil
}

// Text appends words drawn from w to b until it holds at least n bytes.
func (w Words) Text(rng *rand.Rand, b *strings.Builder, n int) {
	start := b.Len()
	for b.Len()-start < n {
		if b.Len() > start {
			b.WriteByte(' ')
		}
		b.WriteString(w[rng.IntN(len(w))])
	}
}

func (w Words) text(rng *rand.Rand, lo, hi int) string {
	var b strings.Builder
	w.Text(rng, &b, lo+rng.IntN(hi-lo+1))
	return b.String()
}

// RolloutShape sizes generated rollouts, in bytes and turns. The defaults
// (DefaultRolloutShape) follow a measured procedural round (paper scale:
// 12.9 messages and 2.7 KB of message text per play on average), with the
// assistant turns of an LLM agent, which write a short reasoning before the
// action, instead of the procedural agent's bare actions.
type RolloutShape struct {
	// PlaysPerEnv is G arms x samples: rows sharing one env_id (8 + 8).
	PlaysPerEnv int
	// MaxTurns bounds the uniform turn count 1..MaxTurns of a play.
	MaxTurns int
	// SystemBytes is the system prompt's length (one per environment).
	SystemBytes int
	// First, Assistant and Observation bound the lengths of the first
	// observation, each assistant message and each later observation: a
	// length is drawn uniformly from [Lo, Hi] bytes, and the text has at
	// least that many. FirstLo and FirstHi bound the first observation.
	FirstLo, FirstHi int
	// AssistantLo and AssistantHi bound an assistant message's text, in
	// bytes, before its "\nAction: ..." line.
	AssistantLo, AssistantHi int
	// ObservationLo and ObservationHi bound each later observation, in
	// bytes.
	ObservationLo, ObservationHi int
}

// DefaultRolloutShape is the shape BenchmarkParquet uses: 2 to 31
// messages per row (17 on average), about 3.6 KB of text per row.
var DefaultRolloutShape = RolloutShape{
	PlaysPerEnv: 16, MaxTurns: 15, SystemBytes: 480,
	FirstLo: 400, FirstHi: 1000, AssistantLo: 20, AssistantHi: 200, ObservationLo: 80, ObservationHi: 300,
}

// Rollouts generates n rollouts rows deterministically from seed: rows of
// the same environment share its system prompt, as real plays do; every
// play has its own turns, observations, actions, step rewards and return.
func (w Words) Rollouts(n int, seed uint64, shape RolloutShape) []schemas.Rollout {
	rng := rand.New(rand.NewPCG(seed, 0xbe4c4))
	rows := make([]schemas.Rollout, 0, n)
	var system string
	for i := range n {
		env := i / shape.PlaysPerEnv
		k := i % shape.PlaysPerEnv
		if k == 0 {
			system = "You are an agent acting in a text environment. " + w.text(rng, shape.SystemBytes, shape.SystemBytes)
		}
		r := schemas.Rollout{
			EnvID:  fmt.Sprintf("%016x", rand.New(rand.NewPCG(seed, uint64(env))).Uint64()),
			Hinted: k >= shape.PlaysPerEnv/2, Sample: int64(k % (shape.PlaysPerEnv / 2)), Seed: rng.Int64N(1 << 53),
		}
		turns := 1 + rng.IntN(shape.MaxTurns)
		r.Messages = append(make([]schemas.Message, 0, 2+2*turns),
			schemas.Message{Role: "system", Content: system},
			schemas.Message{Role: "user", Content: w.text(rng, shape.FirstLo, shape.FirstHi)})
		for t := range turns {
			action := w[rng.IntN(len(w))] + " " + w[rng.IntN(len(w))]
			reward := 0.0
			if t == turns-1 && rng.IntN(2) == 0 {
				reward = 1
			}
			r.Messages = append(r.Messages,
				schemas.Message{Role: "assistant", Content: w.text(rng, shape.AssistantLo, shape.AssistantHi) + "\nAction: " + action},
				schemas.Message{Role: "user", Content: w.text(rng, shape.ObservationLo, shape.ObservationHi)})
			r.Actions = append(r.Actions, action)
			r.StepRewards = append(r.StepRewards, reward)
			r.Return += reward
		}
		r.Turns = int64(turns)
		r.Terminated = r.Return > 0
		r.Truncated = !r.Terminated && turns == shape.MaxTurns
		r.Success = r.Terminated
		rows = append(rows, r)
	}
	return rows
}

// RolloutBytes is the logical size of rows: every string's bytes plus 8
// bytes per number and 1 per bool. It is the numerator of every MB/s
// figure, so writers with different encodings are compared on the same
// work.
func RolloutBytes(rows []schemas.Rollout) int64 {
	var n int64
	for i := range rows {
		r := &rows[i]
		n += int64(len(r.EnvID)+len(r.Error)) + 8*4 + 4
		for _, m := range r.Messages {
			n += int64(len(m.Role) + len(m.Content) + len(m.ToolCalls) + len(m.ToolCallID))
		}
		for _, a := range r.Actions {
			n += int64(len(a))
		}
		n += 8 * int64(len(r.StepRewards))
	}
	return n
}

// CorpusDomains are the domains generated documents are spread over.
var CorpusDomains = []string{"Mathematics", "Physics", "Computer Science", "Biology", "Chemistry", "Economics", "Statistics", "Engineering"}

// CorpusDocs generates documents first..first+n-1 of a synthetic corpus,
// deterministically from seed and each document's index (so parts can be
// generated independently and in any order): doc_id "gen-%07d", a title,
// a domain, 1,000-2,000 bytes of text, and the text's sha256. Rows come
// back sorted by doc_id, as the corpus table stores them.
func (w Words) CorpusDocs(first, n int, seed uint64) []schemas.CorpusDoc {
	out := make([]schemas.CorpusDoc, n)
	for i := range n {
		idx := first + i
		rng := rand.New(rand.NewPCG(seed, uint64(idx)))
		text := w.text(rng, 1000, 2000)
		sum := sha256.Sum256([]byte(text))
		out[i] = schemas.CorpusDoc{
			DocID: fmt.Sprintf("gen-%07d", idx), Source: "bench", Title: w.text(rng, 20, 60),
			Domain: CorpusDomains[rng.IntN(len(CorpusDomains))], Text: text, License: "CC0-1.0",
			SHA256: hex.EncodeToString(sum[:]),
		}
	}
	slices.SortFunc(out, func(a, b schemas.CorpusDoc) int { return strings.Compare(a.DocID, b.DocID) })
	return out
}
