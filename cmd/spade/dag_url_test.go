package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// TestDagStoreURLHidesSecret: url.Parse's error quotes the whole URL, so
// `spade dag airflow` with a malformed store URL holding credentials or a
// secret query value printed them (storage.Open keeps only the parser's
// reason; dagStoreURL, which checks the URL without opening the store,
// wrapped the parser's error whole).
func TestDagStoreURLHidesSecret(t *testing.T) {
	_, err := dagStoreURL("s3://AKIAEXAMPLE:s3cr3tPassw0rd@bucket:port/x?secret_key=hunter2")
	require.ErrorIs(t, err, storage.ErrBadURL)
	for _, secret := range []string{"s3cr3tPassw0rd", "hunter2", "AKIAEXAMPLE"} {
		require.NotContains(t, err.Error(), secret)
	}
	require.Contains(t, err.Error(), "invalid port")
}
