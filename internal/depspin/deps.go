//go:build tools

// Package depspin pins dependencies that the code adopts incrementally.
package depspin

import (
	_ "github.com/apache/arrow-go/v18/parquet/pqarrow"
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	_ "github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/duckdb/duckdb-go/v2"
	_ "github.com/openai/openai-go/v3"
	_ "github.com/parquet-go/parquet-go"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/sourcegraph/conc/pool"
	_ "github.com/spf13/cobra"
	_ "github.com/stretchr/testify/require"
	_ "go.uber.org/goleak"
	_ "gonum.org/v1/gonum/mat"
	_ "gopkg.in/yaml.v3"
)
