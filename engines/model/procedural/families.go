package procedural

import (
	"fmt"
	"sort"
	"strings"
)

// Params are a family's design-time parameters. They are rendered into the
// environment source as a JSON-compatible Python literal (ints, strings,
// lists, objects only: no booleans or nulls, whose spellings differ) and read
// back by the hint writer.
type Params = map[string]any

// family is one environment family: a template plus the code that draws its
// parameters from the document terms and difficulty, and the code that
// writes a hint from those parameters (the family's solution).
type family struct {
	name    string
	skill   string // one of Skills; tool-use workflows carry their own skill
	toolUse bool
	story   string // one prose sentence for the design response
	params  func(g *gen) Params
	hint    func(p Params) string
}

// Skills are the six cognitive-skill categories (docs/method.md step 2).
var Skills = []string{
	"logical_deduction", "spatial_reasoning", "causal_inference",
	"planning", "pattern_induction", "quantitative_reasoning",
}

// families lists every family; the order is part of the design output
// (family choice cycles through it), so append only.
var families = []family{
	{name: "code_breaker", skill: "logical_deduction", params: codeBreakerParams, hint: codeBreakerHint,
		story: "a lock whose code of distinct symbols is deduced from exact-match counts"},
	{name: "truth_tellers", skill: "logical_deduction", params: truthTellersParams, hint: truthTellersHint,
		story: "a council of honest members and liars whose roles follow from their statements"},
	{name: "fog_maze", skill: "spatial_reasoning", params: fogMazeParams, hint: fogMazeHint,
		story: "a maze seen only one cell at a time, to be crossed within a move budget"},
	{name: "grid_scan", skill: "spatial_reasoning", params: gridScanParams, hint: gridScanHint,
		story: "a buried object located on a grid from row and column scans before digging"},
	{name: "faulty_component", skill: "causal_inference", params: faultyParams, hint: faultyHint,
		story: "a processing line whose single faulty stage is found by measuring the signal"},
	{name: "hidden_cause", skill: "causal_inference", params: hiddenCauseParams, hint: hiddenCauseHint,
		story: "a control panel where interventions reveal which lever sets off the alarm, among decoys"},
	{name: "river_crossing", skill: "planning", params: riverParams, hint: riverHint,
		story: "a ferry that must carry every item across without leaving incompatible ones together"},
	{name: "resource_schedule", skill: "planning", params: scheduleParams, hint: scheduleHint,
		story: "jobs on one machine to be ordered so that every deadline is met"},
	{name: "sequence_rule", skill: "pattern_induction", params: sequenceParams, hint: sequenceHint,
		story: "a number sequence with a hidden rule whose next terms must be predicted"},
	{name: "function_probe", skill: "pattern_induction", params: functionParams, hint: functionHint,
		story: "a hidden function probed at chosen inputs and then evaluated far outside them"},
	{name: "bracket_quantity", skill: "quantitative_reasoning", params: bracketParams, hint: bracketHint,
		story: "a hidden quantity bracketed by higher-or-lower comparisons within a guess budget"},
	{name: "budget_allocation", skill: "quantitative_reasoning", params: budgetParams, hint: budgetHint,
		story: "a fixed budget spread over priced options to reach a target total value"},
	{name: "bank_invoice", skill: "tool_use", toolUse: true, params: bankParams, hint: bankHint,
		story: "a banking backend where balances are checked, funds moved and invoices paid"},
	{name: "retail_order", skill: "tool_use", toolUse: true, params: retailParams, hint: retailHint,
		story: "a shop backend where an order's items, quantities, address and coupon are changed"},
	{name: "support_triage", skill: "tool_use", toolUse: true, params: triageParams, hint: triageHint,
		story: "a support desk where tickets are prioritised, assigned and closed"},
}

// familyByName finds a family; ok is false for unknown names.
func familyByName(name string) (family, bool) {
	for _, f := range families {
		if f.name == name {
			return f, true
		}
	}
	return family{}, false
}

// FamilyNames returns every family name, text families first, in registry
// order.
func FamilyNames() []string {
	out := make([]string, 0, len(families))
	for _, f := range families {
		out = append(out, f.name)
	}
	return out
}

// familiesFor returns the families of a skill (text setting) or the tool-use
// workflows, in registry order.
func familiesFor(skill string, toolUse bool) []family {
	var out []family
	for _, f := range families {
		if toolUse {
			if f.toolUse {
				out = append(out, f)
			}
		} else if !f.toolUse && f.skill == skill {
			out = append(out, f)
		}
	}
	return out
}

// ---- parameter accessors for hint writers (JSON numbers decode as float64)

func pInt(p Params, k string) int {
	switch v := p[k].(type) {
	case float64:
		return int(v)
	case int:
		return v
	}
	return 0
}

func pStr(p Params, k string) string {
	s, _ := p[k].(string)
	return s
}

func pStrs(p Params, k string) []string {
	var out []string
	switch v := p[k].(type) {
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	case []string:
		out = v
	}
	return out
}

func quoteAll(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = "'" + x + "'"
	}
	return strings.Join(q, ", ")
}

// ---------------------------------------------------------------- families

func codeBreakerParams(g *gen) Params {
	k := pick(g, [5]int{3, 4, 4, 5, 6})
	l := pick(g, [5]int{2, 2, 3, 3, 3})
	syms := g.names(k)
	return Params{
		"symbols": syms, "length": l, "first": syms[g.rng.IntN(k)],
		"vault": g.name(), "max_turns": pick(g, [5]int{3, 4, 4, 5, 5}),
	}
}

func codeBreakerHint(p Params) string {
	return fmt.Sprintf("The code always begins with '%s', and no symbol repeats.", pStr(p, "first"))
}

func truthTellersParams(g *gen) Params {
	n := pick(g, [5]int{3, 4, 5, 6, 7})
	people := g.names(n)
	return Params{
		"people": people, "honest": people[0], "liar": people[1],
		"strikes": pick(g, [5]int{2, 2, 1, 1, 1}), "council": g.name(),
		"max_turns": min(15, 2*n),
	}
}

func truthTellersHint(p Params) string {
	return fmt.Sprintf("Start with '%s is honest' and '%s is a liar': both hold in every session.",
		pStr(p, "honest"), pStr(p, "liar"))
}

func fogMazeParams(g *gen) Params {
	const w, h = 6, 6
	density := pick(g, [5]float64{0.15, 0.22, 0.28, 0.32, 0.36})
	wantDist := pick(g, [5]int{5, 7, 8, 9, 10})
	slack := pick(g, [5]int{6, 4, 3, 3, 2})
	var best Params
	bestGap := 1 << 30
	for try := 0; try < 60; try++ {
		walls := map[[2]int]bool{}
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				if g.rng.Float64() < density {
					walls[[2]int{x, y}] = true
				}
			}
		}
		start := [2]int{g.rng.IntN(w), g.rng.IntN(h)}
		if walls[start] {
			continue
		}
		dist, prev := bfsGrid(w, h, walls, start)
		// The goal is the reachable cell whose distance is nearest the
		// target, first in row-major order on ties.
		goal, gap := [2]int{-1, -1}, 1<<30
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				c := [2]int{x, y}
				d, ok := dist[c]
				if !ok || d == 0 {
					continue
				}
				if abs(d-wantDist) < gap {
					goal, gap = c, abs(d-wantDist)
				}
			}
		}
		if goal[0] < 0 || gap >= bestGap {
			continue
		}
		var wl [][2]int
		for y := 0; y < h; y++ {
			for x := 0; x < w; x++ {
				if walls[[2]int{x, y}] {
					wl = append(wl, [2]int{x, y})
				}
			}
		}
		plan := mazePath(prev, start, goal)
		best = Params{
			"width": w, "height": h, "walls": wl, "start": start, "goal": goal,
			"plan": plan, "cave": g.name(), "landmarks": g.names(2), "max_turns": min(15, len(plan)+slack),
		}
		g.nextName -= 3 // every try names the same cave and landmarks
		bestGap = gap
		if gap == 0 {
			break
		}
	}
	g.nextName += 3
	if best == nil { // every try walled the start in: an open grid is always solvable
		start, goal := [2]int{0, 0}, [2]int{min(wantDist, w-1), max(0, wantDist-(w-1))}
		dist, prev := bfsGrid(w, h, nil, start)
		_ = dist
		plan := mazePath(prev, start, goal)
		best = Params{"width": w, "height": h, "walls": [][2]int{}, "start": start, "goal": goal,
			"plan": plan, "cave": g.name(), "landmarks": g.names(2), "max_turns": min(15, len(plan)+slack)}
	}
	return best
}

var mazeMoves = []struct {
	name   string
	dx, dy int
}{{"north", 0, -1}, {"east", 1, 0}, {"south", 0, 1}, {"west", -1, 0}}

func bfsGrid(w, h int, walls map[[2]int]bool, start [2]int) (map[[2]int]int, map[[2]int][2]int) {
	dist := map[[2]int]int{start: 0}
	prev := map[[2]int][2]int{}
	queue := [][2]int{start}
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		for _, m := range mazeMoves {
			n := [2]int{c[0] + m.dx, c[1] + m.dy}
			if n[0] < 0 || n[1] < 0 || n[0] >= w || n[1] >= h || walls[n] {
				continue
			}
			if _, seen := dist[n]; seen {
				continue
			}
			dist[n] = dist[c] + 1
			prev[n] = c
			queue = append(queue, n)
		}
	}
	return dist, prev
}

func mazePath(prev map[[2]int][2]int, start, goal [2]int) []string {
	var rev []string
	for c := goal; c != start; {
		p := prev[c]
		for _, m := range mazeMoves {
			if p[0]+m.dx == c[0] && p[1]+m.dy == c[1] {
				rev = append(rev, m.name)
			}
		}
		c = p
	}
	out := make([]string, len(rev))
	for i := range rev {
		out[i] = rev[len(rev)-1-i]
	}
	return out
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func fogMazeHint(p Params) string {
	plan := pStrs(p, "plan")
	if len(plan) == 0 {
		return ""
	}
	k := (len(plan) + 1) / 2
	return fmt.Sprintf("The shortest route opens with %s; after that, keep heading toward the exit.", quoteAll(plan[:k]))
}

func gridScanParams(g *gen) Params {
	r := pick(g, [5]int{4, 5, 6, 7, 8})
	zlo := g.intn(1, r-1)
	return Params{
		"rows": r, "cols": r, "zone": []int{zlo, zlo + 1}, "digs": pick(g, [5]int{3, 2, 2, 1, 1}),
		"site": g.name(), "object": g.name(), "max_turns": pick(g, [5]int{9, 9, 9, 9, 9}),
	}
}

func gridScanHint(p Params) string {
	z, _ := p["zone"].([]any)
	if len(z) == 2 {
		return fmt.Sprintf("The object is always buried in 'row %v' or 'row %v'.", z[0], z[1])
	}
	return "Scan rows and columns before digging."
}

func faultyParams(g *gen) Params {
	n := pick(g, [5]int{8, 12, 16, 24, 32})
	w := pick(g, [5]int{3, 4, 4, 5, 6})
	lo := g.intn(1, n-w+1)
	return Params{
		"stages": g.names(n), "window": []int{lo, lo + w - 1}, "line": g.name(),
		"max_turns": pick(g, [5]int{5, 5, 5, 6, 6}),
	}
}

func faultyHint(p Params) string {
	w, _ := p["window"].([]any)
	if len(w) == 2 {
		return fmt.Sprintf("The faulty stage is always between stage %v and stage %v.", w[0], w[1])
	}
	return "Measure in the middle of the line first."
}

func hiddenCauseParams(g *gen) Params {
	n := pick(g, [5]int{4, 6, 7, 9, 11})
	levers := g.names(n)
	suspects := append([]string(nil), levers[:2]...)
	return Params{
		"levers": levers, "suspects": suspects, "decoys": pick(g, [5]int{0, 1, 2, 2, 3}),
		"panel": g.name(), "max_turns": pick(g, [5]int{5, 5, 5, 6, 6}),
	}
}

func hiddenCauseHint(p Params) string {
	if len(pStrs(p, "suspects")) == 0 {
		return ""
	}
	return fmt.Sprintf("The alarm is always wired to one of %s.", quoteAll(pStrs(p, "suspects")))
}

func riverParams(g *gen) Params {
	n := pick(g, [5]int{3, 3, 3, 4, 4})
	capacity := pick(g, [5]int{1, 2, 1, 2, 2})
	nconf := pick(g, [5]int{1, 1, 2, 2, 3})
	var best Params
	for try := 0; try < 120 && best == nil || try < 80; try++ {
		if try >= 80 && nconf > 1 { // too many conflicts for a solvable puzzle: relax
			nconf--
		}
		items := g.names(n)
		g.nextName -= n // the same names serve every try
		var conf [][2]string
		seen := map[[2]int]bool{}
		for len(conf) < nconf {
			a, b := g.rng.IntN(n), g.rng.IntN(n)
			if a == b {
				continue
			}
			if a > b {
				a, b = b, a
			}
			if seen[[2]int{a, b}] {
				if len(seen) >= n*(n-1)/2 {
					break
				}
				continue
			}
			seen[[2]int{a, b}] = true
			conf = append(conf, [2]string{items[a], items[b]})
		}
		plan := riverSolve(items, conf, capacity)
		if plan == nil || len(plan) > 13 {
			continue
		}
		sort.Slice(conf, func(i, j int) bool { return conf[i][0]+conf[i][1] < conf[j][0]+conf[j][1] })
		best = Params{"items": items, "conflicts": conf, "capacity": capacity, "plan": plan,
			"max_turns": min(15, len(plan)+pick(g, [5]int{8, 7, 6, 5, 4}))}
		if len(plan) >= pick(g, [5]int{5, 3, 7, 5, 7}) {
			break
		}
	}
	g.nextName += n
	best["river"] = g.name()
	return best
}

// riverSolve finds a shortest crossing plan by breadth-first search over
// (items on the far bank, ferry side); nil when none exists.
func riverSolve(items []string, conf [][2]string, capacity int) []string {
	n := len(items)
	idx := map[string]int{}
	for i, it := range items {
		idx[it] = i
	}
	safe := func(bank int) bool {
		for _, c := range conf {
			if bank&(1<<idx[c[0]]) != 0 && bank&(1<<idx[c[1]]) != 0 {
				return false
			}
		}
		return true
	}
	full := 1<<n - 1
	type st struct{ far, side int }
	prev := map[st]st{}
	move := map[st]string{}
	start := st{0, 0}
	seen := map[st]bool{start: true}
	queue := []st{start}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if s.far == full && s.side == 1 {
			var rev []string
			for c := s; c != start; c = prev[c] {
				rev = append(rev, move[c])
			}
			out := make([]string, len(rev))
			for i := range rev {
				out[i] = rev[len(rev)-1-i]
			}
			return out
		}
		here := full &^ s.far
		if s.side == 1 {
			here = s.far
		}
		var loads [][]int
		loads = append(loads, nil)
		for i := 0; i < n; i++ {
			if here&(1<<i) != 0 {
				loads = append(loads, []int{i})
			}
		}
		if capacity >= 2 {
			for i := 0; i < n; i++ {
				for j := i + 1; j < n; j++ {
					if here&(1<<i) != 0 && here&(1<<j) != 0 {
						loads = append(loads, []int{i, j})
					}
				}
			}
		}
		for _, load := range loads {
			mask := 0
			for _, i := range load {
				mask |= 1 << i
			}
			left := here &^ mask
			if !safe(left) {
				continue
			}
			ns := st{s.far | mask, 1}
			if s.side == 1 {
				ns = st{s.far &^ mask, 0}
			}
			if seen[ns] {
				continue
			}
			seen[ns] = true
			prev[ns] = s
			move[ns] = riverAction(items, load)
			queue = append(queue, ns)
		}
	}
	return nil
}

func riverAction(items []string, load []int) string {
	switch len(load) {
	case 0:
		return "cross alone"
	case 1:
		return "cross with " + items[load[0]]
	default:
		return "cross with " + items[load[0]] + " and " + items[load[1]]
	}
}

func riverHint(p Params) string {
	plan := pStrs(p, "plan")
	if len(plan) == 0 {
		return ""
	}
	k := min(len(plan), 3)
	return fmt.Sprintf("A safe plan starts %s.", quoteAll(plan[:k]))
}

func scheduleParams(g *gen) Params {
	n := pick(g, [5]int{3, 4, 4, 5, 6})
	jobs := g.names(n)
	order := append([]string(nil), jobs...)
	g.rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
	dur := map[string]int{}
	due := map[string]int{}
	t := 0
	maxSlack := pick(g, [5]int{3, 2, 1, 1, 0})
	for _, j := range order {
		d := g.intn(1, 5)
		dur[j] = d
		t += d
		due[j] = t + g.intn(0, maxSlack)
	}
	durs := make([]int, n)
	dues := make([]int, n)
	for i, j := range jobs {
		durs[i], dues[i] = dur[j], due[j]
	}
	return Params{"jobs": jobs, "durations": durs, "deadlines": dues, "order": order,
		"workshop": g.name(), "max_turns": n + 2}
}

func scheduleHint(p Params) string {
	order := pStrs(p, "order")
	k := max(1, len(order)/2)
	acts := make([]string, k)
	for i := range acts {
		acts[i] = "run " + order[i]
	}
	return fmt.Sprintf("A schedule that meets every deadline begins %s.", quoteAll(acts))
}

var sequenceKinds = [5]string{"arithmetic", "geometric", "alternating", "quadratic", "recurrence"}

func sequenceParams(g *gen) Params {
	return Params{"kind": pick(g, sequenceKinds), "needed": 3, "lives": 2,
		"shown": pick(g, [5]int{4, 4, 5, 5, 5}), "subject": g.name(), "unit": g.name(), "max_turns": 5}
}

func sequenceHint(p Params) string {
	switch pStr(p, "kind") {
	case "arithmetic":
		return "The rule: each term adds the same constant difference to the previous one."
	case "geometric":
		return "The rule: each term multiplies the previous one by the same ratio."
	case "alternating":
		return "The rule: the differences alternate between two constants."
	case "quadratic":
		return "The rule: the second differences are constant (a quadratic sequence)."
	default:
		return "The rule: each term is the sum of the two previous terms."
	}
}

var functionKinds = [5]string{"linear", "steep", "quadratic", "modular", "piecewise"}

func functionParams(g *gen) Params {
	kind := pick(g, functionKinds)
	p := Params{"kind": kind, "target": g.intn(14, 25), "inputs": 10, "device": g.name(), "setting": g.name(), "reading": g.name(),
		"max_turns": pick(g, [5]int{4, 4, 5, 5, 5})}
	switch kind {
	case "modular":
		p["modulus"] = []int{13, 17, 19, 23, 29}[g.rng.IntN(5)]
	case "piecewise":
		p["threshold"] = g.intn(4, 7)
	}
	return p
}

func functionHint(p Params) string {
	switch pStr(p, "kind") {
	case "linear", "steep":
		return "The function is linear: f(x) = a*x + b."
	case "quadratic":
		return "The function is quadratic: f(x) = a*x*x + b*x + c."
	case "modular":
		return fmt.Sprintf("The function is linear but its values wrap modulo %d.", pInt(p, "modulus"))
	default:
		return fmt.Sprintf("The rule changes at x = %d; beyond it the function is linear.", pInt(p, "threshold"))
	}
}

func bracketParams(g *gen) Params {
	hi := pick(g, [5]int{32, 100, 200, 500, 1000})
	w := max(4, hi/8)
	lo := g.intn(1, hi-w+1)
	things := g.names(2)
	return Params{"lo": 1, "hi": hi, "window": []int{lo, lo + w - 1},
		"quantity":  fmt.Sprintf("the number of %s samples in the %s archive", lowerWords(things[0]), things[1]),
		"max_turns": pick(g, [5]int{5, 6, 7, 8, 9})}
}

func bracketHint(p Params) string {
	w, _ := p["window"].([]any)
	if len(w) == 2 {
		return fmt.Sprintf("The count always lies between %v and %v.", w[0], w[1])
	}
	return "Halve the interval with every guess."
}

func budgetParams(g *gen) Params {
	n := pick(g, [5]int{4, 5, 5, 6, 7})
	names := g.names(n)
	costs := make([]int, n)
	values := make([]int, n)
	total := 0
	for i := range names {
		costs[i] = g.intn(2, 9)
		values[i] = g.intn(1, 12)
		total += costs[i]
	}
	budget := max(3, total*45/100)
	bestV, bestMask := 0, 0
	for m := 0; m < 1<<n; m++ {
		c, v := 0, 0
		for i := 0; i < n; i++ {
			if m&(1<<i) != 0 {
				c += costs[i]
				v += values[i]
			}
		}
		if c <= budget && v > bestV {
			bestV, bestMask = v, m
		}
	}
	var best []string
	for i := 0; i < n; i++ {
		if bestMask&(1<<i) != 0 {
			best = append(best, names[i])
		}
	}
	frac := pick(g, [5]int{60, 75, 85, 95, 100})
	target := max(1, (bestV*frac+99)/100)
	return Params{"items": names, "costs": costs, "values": values, "budget": budget,
		"target": target, "optimum": bestV, "best": best, "fund": g.name(), "max_turns": n + 2}
}

func budgetHint(p Params) string {
	best := pStrs(p, "best")
	k := max(1, (len(best)+1)/2)
	acts := make([]string, k)
	for i := range acts {
		acts[i] = "buy " + best[i]
	}
	return fmt.Sprintf("The best selection includes %s.", quoteAll(acts))
}
