package table

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChunkBuffer writes the same random bytes in writes of random sizes
// (empty, small, exactly a chunk, several chunks) to a chunkBuffer and a
// bytes.Buffer and checks Bytes agrees and survives release and reuse.
func TestChunkBuffer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, total := range []int{0, 1, chunkSize - 1, chunkSize, chunkSize + 1, 5*chunkSize + 17} {
		var cb chunkBuffer
		var want bytes.Buffer
		for want.Len() < total {
			var n int
			switch r.IntN(4) {
			case 0:
				n = 0
			case 1:
				n = r.IntN(100)
			case 2:
				n = chunkSize
			default:
				n = r.IntN(3 * chunkSize)
			}
			n = min(n, total-want.Len())
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			k, err := cb.Write(p)
			require.NoError(t, err)
			require.Equal(t, n, k)
			want.Write(p)
		}
		got := cb.Bytes()
		require.Equal(t, total, len(got))
		require.True(t, bytes.Equal(want.Bytes(), got), "%d bytes", total)
		cb.release()
		// The result must not alias pooled chunks another buffer reuses.
		var other chunkBuffer
		_, _ = other.Write(bytes.Repeat([]byte{0xee}, 2*chunkSize))
		require.True(t, bytes.Equal(want.Bytes(), got), "%d bytes after release and reuse", total)
		other.release()
		// A released buffer is empty and usable again.
		_, _ = cb.Write([]byte("abc"))
		require.Equal(t, []byte("abc"), cb.Bytes())
		cb.release()
	}
}
