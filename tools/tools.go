//go:build tools

// Package tools pins the versions of binaries the tests and Makefile build
// (currently the versitygw S3-compatible server used by the s3 storage
// backend's tests). It lives in its own module so that the server's large
// dependency tree stays out of the main go.mod; the build tag keeps it out
// of every normal build.
package tools

import (
	_ "github.com/versity/versitygw/cmd/versitygw"
)
