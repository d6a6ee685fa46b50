// Package backends fills the storage registry: importing it (blank) makes
// file://, s3:// and mem:// URLs openable with storage.Open. It is the one
// place backends are listed, so a binary that wants a smaller set can
// import the backend packages it needs instead.
package backends

import (
	// Each registers its scheme in init.
	_ "github.com/spade-pipeline/spade/pipeline/storage/filestore"
	_ "github.com/spade-pipeline/spade/pipeline/storage/memstore"
	_ "github.com/spade-pipeline/spade/pipeline/storage/s3store"
)
