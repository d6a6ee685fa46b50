package metrics

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/lapack/lapack64"
	"gonum.org/v1/gonum/mat"
)

// DefaultLSADim is the LSA dimension of the SPADE paper's diversity
// robustness check (app. F: "TF-IDF + LSA-128").
const DefaultLSADim = 128

// vendiOptions are the knobs of the truncated SVD; tests reach them to
// compare the exact and the randomized path.
type vendiOptions struct {
	// exactMax: when min(n, V) is at most this, the SVD is exact, from the
	// eigendecomposition of the Gram matrix on the smaller side.
	exactMax int
	// oversample and powerIters are p and q of the randomized range finder
	// (Halko, Martinsson & Tropp 2011, alg. 4.4). scikit-learn's
	// TruncatedSVD uses p = 10, q = 5; we spend more (p = 20, q = 10)
	// because the tail of a TF-IDF spectrum is flat and the score depends
	// on which directions make the cut (see docs/metrics.md for measured
	// errors against the exact SVD).
	oversample int
	powerIters int
	// seed of the Gaussian test matrix; fixed, so results are repeatable.
	seed uint64
}

var defaultVendiOptions = vendiOptions{exactMax: 256, oversample: 20, powerIters: 10, seed: 0x5ead_0001}

// eigFloor is the magnitude below which an eigenvalue of K/n counts as 0:
// rounding leaves values around ±1e-16 where the exact value is 0, and a
// negative one has no logarithm.
const eigFloor = 1e-12

// zeroRowNorm is the LSA row norm below which a text's embedding counts as
// zero (TF-IDF rows have norm 1, so this is relative).
const zeroRowNorm = 1e-9

// Vendi returns the Vendi score (Friedman & Dieng 2023, "The Vendi Score:
// A Diversity Evaluation Metric for Machine Learning") of texts, the SPADE
// paper's diversity measure (app. F, TF-IDF + LSA robustness check).
//
// Pipeline: Tokenize each text; TF-IDF with sublinear tf 1+ln(count),
// smooth idf ln((1+n)/(1+df))+1 and L2-normalised rows; truncated SVD to
// k = min(dim, n, V) components (V = vocabulary size), taking the LSA
// embedding U_k·Σ_k; L2-normalise embedding rows; K = cosine similarity
// matrix; score = exp(−Σ λᵢ ln λᵢ) over the eigenvalues λ of K/n.
//
// The score is the effective number of distinct texts: 1 when all n are
// identical, n when they are mutually orthogonal (disjoint vocabularies
// and n ≤ dim), in between otherwise. The n×n matrix K is never built:
// the nonzero eigenvalues of K/n are those of EᵀE/n (k×k) for the n×k
// normalised embedding E. The SVD is exact (Gram eigendecomposition) when
// min(n, V) ≤ 256 and randomized with fixed seed otherwise; see
// docs/metrics.md. dim is the LSA dimension, normally DefaultLSADim.
//
// Errors: ErrEmpty for no texts; an error for dim < 1 or a failed
// eigendecomposition.
func Vendi(texts []string, dim int) (float64, error) {
	return vendi(texts, dim, defaultVendiOptions)
}

// VendiPerN returns Vendi(texts, dim) / len(texts), in [1/n, 1]: the share
// of the round's environments that are effectively distinct. The SPADE
// paper reports this ratio (0.68 with corpus grounding, 0.04 without).
// Errors as Vendi.
func VendiPerN(texts []string, dim int) (float64, error) {
	s, err := Vendi(texts, dim)
	if err != nil {
		return 0, err
	}
	return s / float64(len(texts)), nil
}

func vendi(texts []string, dim int, opt vendiOptions) (float64, error) {
	n := len(texts)
	if n == 0 {
		return 0, fmt.Errorf("vendi score: %w", ErrEmpty)
	}
	if dim < 1 {
		return 0, fmt.Errorf("vendi score: LSA dimension %d, want >= 1", dim)
	}
	if n == 1 {
		return 1, nil
	}
	x := tfidf(texts)
	emb, err := lsa(x, min(dim, n, x.cols), opt)
	if err != nil {
		return 0, fmt.Errorf("vendi score over %d texts: %w", n, err)
	}
	s, err := vendiOfEmbedding(emb)
	if err != nil {
		return 0, fmt.Errorf("vendi score over %d texts: %w", n, err)
	}
	return s, nil
}

// lsa returns the n×k LSA embedding X·V_k of x, V_k the top-k right
// singular vectors. Only the span of V_k matters downstream (cosine
// similarities are invariant to a rotation of the embedding), so signs and
// the order of equal singular values do not affect the score.
func lsa(x *csr, k int, opt vendiOptions) (*mat.Dense, error) {
	small := min(x.rows, x.cols)
	if small <= opt.exactMax || k+opt.oversample >= small {
		return lsaExact(x, k)
	}
	return lsaRandomized(x, k, opt)
}

// lsaExact eigendecomposes the Gram matrix of the smaller side.
func lsaExact(x *csr, k int) (*mat.Dense, error) {
	if x.rows <= x.cols {
		// X Xᵀ = U Σ² Uᵀ, and X V_k = U_k Σ_k.
		vals, vecs, err := topEigen(x.gram(), k)
		if err != nil {
			return nil, err
		}
		for c, v := range vals {
			s := math.Sqrt(max(v, 0))
			for r := 0; r < x.rows; r++ {
				vecs.Set(r, c, vecs.At(r, c)*s)
			}
		}
		return vecs, nil
	}
	// XᵀX = V Σ² Vᵀ.
	_, vecs, err := topEigen(x.transpose().gram(), k)
	if err != nil {
		return nil, err
	}
	return x.mul(nil, vecs), nil
}

// lsaRandomized finds the top-k subspace with randomized subspace
// iteration on the smaller side (Halko, Martinsson & Tropp 2011, alg. 4.4,
// orthonormalising after each product with A·Aᵀ), then solves the small
// l×l eigenproblem exactly. Cost O((2q+2)·nnz·l + min(n,V)·l²), memory
// O(max(n,V)·l) with l = k + oversample.
func lsaRandomized(x *csr, k int, opt vendiOptions) (*mat.Dense, error) {
	a := x
	rowsSide := x.rows <= x.cols
	if !rowsSide {
		a = x.transpose()
	}
	l := min(k+opt.oversample, a.rows)
	rng := rand.New(rand.NewPCG(opt.seed, uint64(k)))
	omega := mat.NewDense(a.cols, l, nil)
	raw := omega.RawMatrix().Data
	for i := range raw {
		raw[i] = gaussian(rng)
	}
	q, err := orthonormalize(a.mul(nil, omega))
	if err != nil {
		return nil, err
	}
	z := omega // a.cols×l, reused for every Aᵀ·Q
	y := mat.NewDense(a.rows, l, nil)
	for it := 0; it < opt.powerIters; it++ {
		z = a.tmul(z, q)
		y, q = q, y
		q, err = orthonormalize(a.mul(q, z))
		if err != nil {
			return nil, err
		}
	}
	z = a.tmul(z, q) // Aᵀ Q: V×l when A = X, n×l when A = Xᵀ
	var m mat.SymDense
	m.SymOuterK(1, z.T())
	vals, u, err := topEigen(&m, k)
	if err != nil {
		return nil, err
	}
	var emb mat.Dense
	if rowsSide {
		// X ≈ Q Qᵀ X and Qᵀ X = U_B Σ_B V_Bᵀ, so X V_k ≈ Q U_k Σ_k.
		emb.Mul(q, u)
		for c, v := range vals {
			s := math.Sqrt(max(v, 0))
			for r := 0; r < x.rows; r++ {
				emb.Set(r, c, emb.At(r, c)*s)
			}
		}
	} else {
		// Q spans the top right singular subspace; rotate X Q onto its
		// principal axes.
		emb.Mul(z, u)
	}
	return &emb, nil
}

// topEigen returns the k largest eigenvalues of s, descending, and their
// eigenvectors as the columns of an r×k matrix.
func topEigen(s mat.Symmetric, k int) ([]float64, *mat.Dense, error) {
	var eig mat.EigenSym
	if !eig.Factorize(s, true) {
		return nil, nil, errors.New("symmetric eigendecomposition did not converge")
	}
	vals := eig.Values(nil) // ascending
	var all mat.Dense
	eig.VectorsTo(&all)
	r := len(vals)
	top := make([]float64, k)
	vecs := mat.NewDense(r, k, nil)
	for c := 0; c < k; c++ {
		src := r - 1 - c
		top[c] = vals[src]
		for i := 0; i < r; i++ {
			vecs.Set(i, c, all.At(i, src))
		}
	}
	return top, vecs, nil
}

// orthonormalize returns a matrix with orthonormal columns spanning the
// columns of y (r×l, r ≥ l): the thin Q of a Householder QR.
func orthonormalize(y *mat.Dense) (*mat.Dense, error) {
	r, l := y.Dims()
	g := y.RawMatrix()
	ga := blas64.General{Rows: r, Cols: l, Stride: g.Stride, Data: g.Data}
	tau := make([]float64, l)
	work := make([]float64, 1)
	lapack64.Geqrf(ga, tau, work, -1)
	lapack64.Orgqr(ga, tau, work, -1)
	work = make([]float64, max(int(work[0]), l))
	lapack64.Geqrf(ga, tau, work, len(work))
	lapack64.Orgqr(ga, tau, work, len(work))
	for _, v := range g.Data {
		if math.IsNaN(v) {
			return nil, errors.New("orthonormalization produced NaN")
		}
	}
	return y, nil
}

// gaussian draws a standard normal value by Box-Muller from rng, written
// out so the stream depends only on the PCG generator's specified output.
func gaussian(rng *rand.Rand) float64 {
	u1 := (float64(rng.Uint64()>>11) + 0.5) / (1 << 53)
	u2 := float64(rng.Uint64()>>11) / (1 << 53)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

// vendiOfEmbedding L2-normalises the rows of emb (n×k) and returns
// exp(entropy) of the eigenvalues of K/n, K = E Eᵀ, computed from EᵀE.
// Rows of (near) zero norm stay zero and the eigenvalues are divided by
// their sum instead of n, so such a text counts as absent rather than as
// a negative contribution; with unit rows the sum is exactly trace(K)/n = 1.
func vendiOfEmbedding(emb *mat.Dense) (float64, error) {
	n, _ := emb.Dims()
	for r := 0; r < n; r++ {
		row := emb.RawRowView(r)
		var sq float64
		for _, v := range row {
			sq += v * v
		}
		norm := math.Sqrt(sq)
		for c := range row {
			if norm < zeroRowNorm {
				row[c] = 0
			} else {
				row[c] /= norm
			}
		}
	}
	var s mat.SymDense
	s.SymOuterK(1, emb.T())
	var eig mat.EigenSym
	if !eig.Factorize(&s, false) {
		return 0, errors.New("similarity eigendecomposition did not converge")
	}
	vals := eig.Values(nil)
	var total float64
	for i, v := range vals {
		if v < eigFloor*float64(n) {
			vals[i] = 0
		}
		total += vals[i]
	}
	if total == 0 {
		return 0, errors.New("all LSA embeddings are zero")
	}
	var h float64
	for _, v := range vals {
		if v > 0 {
			p := v / total
			h -= p * math.Log(p)
		}
	}
	return math.Exp(h), nil
}

// VendiOfEmbeddings returns the Vendi score of n texts given their
// embeddings (n rows of equal length d, any scale: rows are L2-normalised
// here), computed as Vendi's last step: exp(entropy) of the eigenvalues
// of K/n, K the cosine-similarity matrix. The SPADE paper's main
// diversity measure applies it to SBERT sentence embeddings (app. F);
// stages/roundmetrics supplies all-MiniLM-L6-v2 embeddings.
//
// Errors: ErrEmpty for no rows; an error naming the row for rows of
// unequal length, an empty row or a NaN/±Inf value (ErrNonFinite); an
// error when every row is zero or the eigendecomposition fails.
func VendiOfEmbeddings(rows [][]float64) (float64, error) {
	n := len(rows)
	if n == 0 {
		return 0, fmt.Errorf("vendi score of embeddings: %w", ErrEmpty)
	}
	d := len(rows[0])
	if d == 0 {
		return 0, fmt.Errorf("vendi score of embeddings: row 0 is empty")
	}
	data := make([]float64, 0, n*d)
	for i, r := range rows {
		if len(r) != d {
			return 0, fmt.Errorf("vendi score of embeddings: row %d has %d values, row 0 has %d", i, len(r), d)
		}
		for j, v := range r {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, fmt.Errorf("vendi score of embeddings: row %d value %d is %v: %w", i, j, v, ErrNonFinite)
			}
		}
		data = append(data, r...)
	}
	if n == 1 {
		return 1, nil
	}
	s, err := vendiOfEmbedding(mat.NewDense(n, d, data))
	if err != nil {
		return 0, fmt.Errorf("vendi score of %d embeddings: %w", n, err)
	}
	return s, nil
}
