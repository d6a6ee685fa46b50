package procedural

import (
	"math"
	"strings"
)

// Rule induction for number sequences and probed functions. The persona's
// depth bounds which rule classes the agent considers unaided; a hint that
// names the rule puts it first whatever the depth, which is how a hint turns
// an unsolved environment into a solved one (positive regret).

// sequenceRules in order of depth: constant difference, constant ratio,
// alternating differences, constant second difference, Fibonacci-like sum.
var sequenceRules = []struct {
	hintWords []string
	predict   func(s []int) (int, bool)
}{
	{[]string{"constant difference", "same constant difference"}, func(s []int) (int, bool) {
		if len(s) < 3 {
			return 0, false
		}
		d := s[1] - s[0]
		for i := 2; i < len(s); i++ {
			if s[i]-s[i-1] != d {
				return 0, false
			}
		}
		return s[len(s)-1] + d, true
	}},
	{[]string{"ratio", "multiplies"}, func(s []int) (int, bool) {
		if len(s) < 3 || s[0] == 0 || s[1]%s[0] != 0 {
			return 0, false
		}
		q := s[1] / s[0]
		for i := 2; i < len(s); i++ {
			if s[i] != s[i-1]*q {
				return 0, false
			}
		}
		return s[len(s)-1] * q, true
	}},
	{[]string{"alternate"}, func(s []int) (int, bool) {
		if len(s) < 4 {
			return 0, false
		}
		for i := 3; i < len(s); i++ {
			if s[i]-s[i-1] != s[i-2]-s[i-3] {
				return 0, false
			}
		}
		return s[len(s)-1] + s[len(s)-2] - s[len(s)-3], true
	}},
	{[]string{"second difference", "quadratic"}, func(s []int) (int, bool) {
		if len(s) < 4 {
			return 0, false
		}
		c := s[2] - 2*s[1] + s[0]
		for i := 3; i < len(s); i++ {
			if s[i]-2*s[i-1]+s[i-2] != c {
				return 0, false
			}
		}
		n := len(s)
		return s[n-1] + (s[n-1] - s[n-2]) + c, true
	}},
	{[]string{"two previous", "sum of the two"}, func(s []int) (int, bool) {
		if len(s) < 3 {
			return 0, false
		}
		for i := 2; i < len(s); i++ {
			if s[i] != s[i-1]+s[i-2] {
				return 0, false
			}
		}
		return s[len(s)-1] + s[len(s)-2], true
	}},
}

func (a *agentCtx) predictSequence(s []int) int {
	hint := strings.ToLower(a.hint)
	for _, r := range sequenceRules {
		for _, w := range r.hintWords {
			if strings.Contains(hint, w) {
				if v, ok := r.predict(s); ok {
					return v
				}
			}
		}
	}
	for i, r := range sequenceRules {
		if i >= a.p.depth {
			break
		}
		if v, ok := r.predict(s); ok {
			return v
		}
	}
	if n := len(s); n >= 2 {
		return s[n-1] + s[n-1] - s[n-2]
	}
	if len(s) == 1 {
		return s[0]
	}
	return 0
}

type point struct{ x, y int }

func (a *agentCtx) functionPoints() []point {
	var pts []point
	seen := map[int]bool{}
	for _, o := range a.allObs[1:] {
		for _, m := range fxRE.FindAllStringSubmatch(o, -1) {
			x := atoi(m[1])
			if !seen[x] {
				seen[x] = true
				pts = append(pts, point{x, atoi(m[2])})
			}
		}
	}
	return pts
}

// fitLinear returns the line through the first two points if every point
// lies on it.
func fitLinear(pts []point) (func(int) int, bool) {
	if len(pts) < 2 || pts[0].x == pts[1].x {
		return nil, false
	}
	dy, dx := pts[1].y-pts[0].y, pts[1].x-pts[0].x
	if dy%dx != 0 {
		return nil, false
	}
	m := dy / dx
	b := pts[0].y - m*pts[0].x
	f := func(x int) int { return m*x + b }
	for _, p := range pts {
		if f(p.x) != p.y {
			return nil, false
		}
	}
	return f, true
}

// fitQuadratic returns the Lagrange parabola through the first three points
// if every point lies on it.
func fitQuadratic(pts []point) (func(int) int, bool) {
	if len(pts) < 3 {
		return nil, false
	}
	p0, p1, p2 := pts[0], pts[1], pts[2]
	f := func(x int) int {
		xf := float64(x)
		l0 := (xf - float64(p1.x)) * (xf - float64(p2.x)) / (float64(p0.x-p1.x) * float64(p0.x-p2.x))
		l1 := (xf - float64(p0.x)) * (xf - float64(p2.x)) / (float64(p1.x-p0.x) * float64(p1.x-p2.x))
		l2 := (xf - float64(p0.x)) * (xf - float64(p1.x)) / (float64(p2.x-p0.x) * float64(p2.x-p1.x))
		return int(math.Round(float64(p0.y)*l0 + float64(p1.y)*l1 + float64(p2.y)*l2))
	}
	for _, p := range pts {
		if f(p.x) != p.y {
			return nil, false
		}
	}
	return f, true
}

// fitModular finds the unique a, b with y = (a*x + b) mod m on every point.
func fitModular(pts []point, m int) (func(int) int, bool) {
	if len(pts) < 2 || m < 2 || m > 500 {
		return nil, false
	}
	var found func(int) int
	count := 0
	for a := 0; a < m; a++ {
		for b := 0; b < m; b++ {
			ok := true
			for _, p := range pts {
				if ((a*p.x+b)%m+m)%m != p.y {
					ok = false
					break
				}
			}
			if ok {
				count++
				aa, bb := a, b
				found = func(x int) int { return ((aa*x+bb)%m + m) % m }
			}
		}
	}
	return found, count == 1
}

// predictFunction evaluates the probed function at the reported input and
// says whether the agent trusts the value enough to answer now.
func (a *agentCtx) predictFunction() (int, bool) {
	target := 0
	if m := reportRE.FindStringSubmatch(a.first); m != nil {
		target = atoi(m[1])
	}
	pts := a.pts
	hint := strings.ToLower(a.hint)
	if m := thresholdRE.FindStringSubmatch(a.hint); m != nil {
		t := atoi(m[1])
		var beyond []point
		for _, p := range pts {
			if p.x >= t {
				beyond = append(beyond, p)
			}
		}
		if f, ok := fitLinear(beyond); ok {
			return f(target), true
		}
	}
	if m := moduloRE.FindStringSubmatch(a.hint); m != nil {
		if f, ok := fitModular(pts, atoi(m[1])); ok {
			return f(target), true
		}
	}
	hintLinear := strings.Contains(hint, "linear")
	hintQuad := strings.Contains(hint, "quadratic")
	if f, ok := fitLinear(pts); ok && (a.p.depth >= 1 || hintLinear) {
		return f(target), len(pts) >= 3 || (hintLinear && len(pts) >= 2)
	}
	if f, ok := fitQuadratic(pts); ok && (a.p.depth >= 2 || hintQuad) {
		return f(target), len(pts) >= 4 || (hintQuad && len(pts) >= 3)
	}
	if a.p.depth >= 4 && len(pts) >= 2 { // local linear trend of the two largest inputs
		hi1, hi2 := pts[0], pts[1]
		if hi2.x > hi1.x {
			hi1, hi2 = hi2, hi1
		}
		for _, p := range pts[2:] {
			if p.x > hi1.x {
				hi1, hi2 = p, hi1
			} else if p.x > hi2.x {
				hi2 = p
			}
		}
		if f, ok := fitLinear([]point{hi2, hi1}); ok {
			return f(target), false
		}
	}
	if len(pts) > 0 {
		return pts[len(pts)-1].y, false
	}
	return 0, false
}

// probeFunction scores query/answer actions of a function-probing task.
func (a *agentCtx) probeFunction(c *candidate) float64 {
	if !a.fnTask {
		return 0
	}
	lastTurn := a.budget > 0 && a.turn >= a.budget-1
	switch c.verb {
	case "answer":
		if a.fnSure || lastTurn {
			return 3
		}
		return -1
	case "query":
		s := 0.0
		if m := thresholdRE.FindStringSubmatch(a.hint); m != nil {
			if c.num >= atoi(m[1]) {
				s += 0.5
			} else {
				s -= 0.5
			}
		}
		gap := 10
		for _, p := range a.pts {
			gap = min(gap, abs(p.x-c.num))
		}
		return s + 0.3*float64(gap)/10
	}
	return 0
}
