package metrics

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/mat"
)

// emptyTerm stands in for the terms of a text that has none (empty source,
// only numbers or punctuation). Tokenize never emits it because it contains
// a NUL, so all term-less texts look identical to each other and unlike
// every other text, instead of becoming zero vectors that cosine similarity
// cannot handle.
const emptyTerm = "\x00empty"

// csr is a sparse matrix in compressed sparse row form. Column indices
// within a row are strictly increasing, which fixes the order of every
// floating-point sum below and so makes results bit-for-bit repeatable.
type csr struct {
	rows, cols int
	indptr     []int // len rows+1; row i is ind[indptr[i]:indptr[i+1]]
	ind        []int
	val        []float64
}

// tfidf builds the n×V TF-IDF matrix of texts over their sorted vocabulary
// with sublinear tf = 1 + ln(count), smooth idf = ln((1+n)/(1+df)) + 1 and
// L2-normalised rows (the variants of scikit-learn's TfidfVectorizer with
// sublinear_tf=True, smooth_idf=True, norm="l2"). Every row has unit norm:
// idf ≥ 1 and each row has at least one term (see emptyTerm).
func tfidf(texts []string) *csr {
	n := len(texts)
	type docTerms struct {
		terms  []string // sorted, distinct
		counts []int
	}
	docs := make([]docTerms, n)
	df := map[string]int{}
	for i, text := range texts {
		toks := Tokenize(text)
		if len(toks) == 0 {
			toks = []string{emptyTerm}
		}
		slices.Sort(toks)
		var d docTerms
		for j, t := range toks {
			if j > 0 && t == toks[j-1] {
				d.counts[len(d.counts)-1]++
				continue
			}
			d.terms = append(d.terms, t)
			d.counts = append(d.counts, 1)
			df[t]++
		}
		docs[i] = d
	}
	vocab := make([]string, 0, len(df))
	for t := range df {
		vocab = append(vocab, t)
	}
	slices.Sort(vocab)
	id := make(map[string]int, len(vocab))
	idf := make([]float64, len(vocab))
	for j, t := range vocab {
		id[t] = j
		idf[j] = math.Log(float64(1+n)/float64(1+df[t])) + 1
	}
	x := &csr{rows: n, cols: len(vocab), indptr: make([]int, n+1)}
	for i, d := range docs {
		start := len(x.val)
		var sq float64
		for j, t := range d.terms {
			c := id[t]
			w := (1 + math.Log(float64(d.counts[j]))) * idf[c]
			x.ind = append(x.ind, c)
			x.val = append(x.val, w)
			sq += w * w
		}
		norm := math.Sqrt(sq)
		for p := start; p < len(x.val); p++ {
			x.val[p] /= norm
		}
		x.indptr[i+1] = len(x.val)
	}
	return x
}

// transpose returns xᵀ in CSR form (that is, x in CSC form); column
// indices stay sorted because rows are visited in order.
func (x *csr) transpose() *csr {
	t := &csr{rows: x.cols, cols: x.rows, indptr: make([]int, x.cols+1),
		ind: make([]int, len(x.ind)), val: make([]float64, len(x.val))}
	for _, c := range x.ind {
		t.indptr[c+1]++
	}
	for c := 0; c < x.cols; c++ {
		t.indptr[c+1] += t.indptr[c]
	}
	next := slices.Clone(t.indptr[:x.cols])
	for i := 0; i < x.rows; i++ {
		for p := x.indptr[i]; p < x.indptr[i+1]; p++ {
			c := x.ind[p]
			t.ind[next[c]] = i
			t.val[next[c]] = x.val[p]
			next[c]++
		}
	}
	return t
}

// mul returns x·d, a rows×l dense matrix, for d cols×l. dst is reused
// when it has the right shape, so the power iteration allocates once.
func (x *csr) mul(dst, d *mat.Dense) *mat.Dense {
	_, l := d.Dims()
	dst = zeroed(dst, x.rows, l)
	or, dr := dst.RawMatrix(), d.RawMatrix()
	for i := 0; i < x.rows; i++ {
		out := or.Data[i*or.Stride : i*or.Stride+l]
		for p := x.indptr[i]; p < x.indptr[i+1]; p++ {
			axpy(x.val[p], dr.Data[x.ind[p]*dr.Stride:x.ind[p]*dr.Stride+l], out)
		}
	}
	return dst
}

// tmul returns xᵀ·d, a cols×l dense matrix, for d rows×l; dst as in mul.
func (x *csr) tmul(dst, d *mat.Dense) *mat.Dense {
	_, l := d.Dims()
	dst = zeroed(dst, x.cols, l)
	or, dr := dst.RawMatrix(), d.RawMatrix()
	for i := 0; i < x.rows; i++ {
		src := dr.Data[i*dr.Stride : i*dr.Stride+l]
		for p := x.indptr[i]; p < x.indptr[i+1]; p++ {
			c := x.ind[p]
			axpy(x.val[p], src, or.Data[c*or.Stride:c*or.Stride+l])
		}
	}
	return dst
}

// zeroed returns dst cleared if it is r×c, else a new r×c zero matrix.
func zeroed(dst *mat.Dense, r, c int) *mat.Dense {
	if dst == nil {
		return mat.NewDense(r, c, nil)
	}
	if dr, dc := dst.Dims(); dr != r || dc != c {
		return mat.NewDense(r, c, nil)
	}
	dst.Zero()
	return dst
}

// gram returns x·xᵀ (rows×rows). Row i is scattered into a dense work
// vector once, then dotted with each later row's nonzeros.
func (x *csr) gram() *mat.SymDense {
	g := mat.NewSymDense(x.rows, nil)
	work := make([]float64, x.cols)
	for i := 0; i < x.rows; i++ {
		for p := x.indptr[i]; p < x.indptr[i+1]; p++ {
			work[x.ind[p]] = x.val[p]
		}
		for j := i; j < x.rows; j++ {
			var s float64
			for p := x.indptr[j]; p < x.indptr[j+1]; p++ {
				s += work[x.ind[p]] * x.val[p]
			}
			g.SetSym(i, j, s)
		}
		for p := x.indptr[i]; p < x.indptr[i+1]; p++ {
			work[x.ind[p]] = 0
		}
	}
	return g
}

// axpy sets y += a·x through gonum's BLAS, whose unit-stride kernel is
// vectorised; the summation order per element is fixed either way.
func axpy(a float64, x, y []float64) {
	blasImpl.Daxpy(len(x), a, x, 1, y, 1)
}

var blasImpl = blas64.Implementation()
