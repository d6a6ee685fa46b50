package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/stages/model"
	"github.com/spade-pipeline/spade/stages/model/modeltest"
)

// TestMaxRetries: model.max_retries counts retries after the first attempt,
// and 0 means none (the openai backend's own zero value means its default).
func TestMaxRetries(t *testing.T) {
	for _, retries := range []int{0, 2} {
		fail := modeltest.Fault{Kind: modeltest.FaultServerError}
		srv := modeltest.Start(t, modeltest.WithFaultSequence(fail, fail, fail, fail, fail, fail, fail))
		cfg := config.Default()
		cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srv.URL, "m"
		cfg.Model.APIKeyEnv, cfg.Model.MaxRetries = "", retries
		b, err := (&Engines{Config: &cfg}).Backend()
		require.NoError(t, err)
		_, err = b.Chat(context.Background(), model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}})
		require.Error(t, err)
		require.Len(t, srv.Requests(), retries+1, "max_retries %d", retries)
	}
}
