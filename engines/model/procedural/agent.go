package procedural

import (
	"math"
	"math/rand/v2"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spade-pipeline/spade/engines/model"
)

// The text agent is a search policy over the actions an observation lists.
// It never sees the environment source: everything comes from observation
// text and the hint. Each turn it scores every candidate action with a few
// general reasoning modules (avoid what failed, follow positive evidence,
// bisect ordered options on higher/lower feedback, keep guesses consistent
// with match counts, head toward a stated goal position, induce a number
// rule, compare stated costs and deadlines, follow quoted hint actions) and
// takes the best, except that with the persona's probability eps it acts at
// random.

var (
	placeholdRE  = regexp.MustCompile(`<[^<>]+>`)
	rangeRE      = regexp.MustCompile(`\((-?\d+) to (-?\d+)\)`)
	intRE        = regexp.MustCompile(`-?\d+`)
	quoteRE      = regexp.MustCompile(`'([^']{1,80})'|"([^"]{1,80})"`)
	betweenRE    = regexp.MustCompile(`(?i)between (?:stage |row |col )?(-?\d+) and (?:stage |row |col )?(-?\d+)`)
	budgetRE     = regexp.MustCompile(`(?i)(?:you have (\d+) (?:guesses|actions|moves|turns|crossings)|within (\d+) (?:moves|crossings|turns|actions))`)
	exactRE      = regexp.MustCompile(`(?i)exact matches: (\d+)`)
	posRE        = regexp.MustCompile(`(?i)you are at \((-?\d+), ?(-?\d+)\)`)
	goalRE       = regexp.MustCompile(`(?i)(?:exit|goal|target)[^()\n]{0,20}\((-?\d+), ?(-?\d+)\)`)
	optionRE     = regexp.MustCompile(`([A-Z][A-Za-z0-9]*) \((?:cost|price) (\d+), (?:value|gain|benefit) (\d+)\)`)
	budgetLeftRE = regexp.MustCompile(`(?i)budget left: (\d+)`)
	soFarRE      = regexp.MustCompile(`(?i)value so far: (\d+)`)
	atLeastRE    = regexp.MustCompile(`(?i)at least (\d+)`)
	deadlineRE   = regexp.MustCompile(`([A-Z][A-Za-z0-9]*) takes (\d+)h, due by hour (\d+)`)
	sequenceRE   = regexp.MustCompile(`(?i)sequence so far: ([-\d, ]+)`)
	fxRE         = regexp.MustCompile(`f\((-?\d+)\) = (-?\d+)`)
	reportRE     = regexp.MustCompile(`(?i)report f\((-?\d+)\)`)
	moduloRE     = regexp.MustCompile(`(?i)modulo (\d+)`)
	thresholdRE  = regexp.MustCompile(`(?i)changes at x = (-?\d+)`)
)

var commitVerbs = map[string]bool{
	"answer": true, "submit": true, "dig": true, "blame": true, "replace": true, "finish": true,
	"accuse": true, "declare": true, "choose": true, "select": true, "solve": true, "done": true,
}

var directions = map[string][2]int{
	"north": {0, -1}, "south": {0, 1}, "east": {1, 0}, "west": {-1, 0},
	"up": {0, -1}, "down": {0, 1}, "right": {1, 0}, "left": {-1, 0},
}

// playStep is one past turn: the observation it was taken in, the action,
// and the observation that answered it.
type playStep struct {
	before, action, after string
	fb                    string // feedback line of after, lower-cased
	pol                   int    // polarity of fb
	sig                   string // state signature of before
}

// candidate is one concrete action with its score.
type candidate struct {
	text   string
	verb   string
	num    int
	hasNum bool
	tmpl   bool // filled from a "<integer>" placeholder
	score  float64
}

type agentCtx struct {
	p       persona
	rng     *rand.Rand
	first   string // first observation (task statement)
	cur     string
	steps   []playStep
	turn    int
	budget  int // turns announced by the environment, 0 when unknown
	hint    string
	quotes  []string
	allObs  []string
	window  []playStep // the steps the persona remembers for constraints
	lo, hi  int
	bracket bool
	// Parsed once per turn, shared by every candidate's scoring.
	curSig     string
	opts       [][]string // "Name (cost c, value v)" options
	budgetLeft int        // -1 when not stated
	goalMet    bool       // "value so far" reached the stated target
	deadlines  [][]string // "Name takes dh, due by hour t" (depth >= 3)
	waiting    string     // the current valid actions, space-joined
	fnTask     bool       // a "report f(x)" task
	pts        []point
	fnValue    int
	fnSure     bool
}

// textAct chooses the next action of a text play. It is pure: the same
// messages, hint, seed and choice give the same action.
func textAct(msgs []model.Message, hint string, seed int64, choice int) string {
	var obs, acts []string
	for _, m := range msgs {
		switch m.Role {
		case model.RoleUser, model.RoleTool:
			obs = append(obs, m.Content)
		case model.RoleAssistant:
			acts = append(acts, m.Content)
		}
	}
	if len(obs) == 0 {
		return "look"
	}
	a := &agentCtx{p: newPersona(seed, choice), first: obs[0], cur: obs[len(obs)-1], turn: len(acts), hint: hint, allObs: obs}
	a.rng = turnRand(seed, choice, a.turn)
	for i, act := range acts {
		if i+1 < len(obs) {
			fb := feedback(obs[i+1])
			a.steps = append(a.steps, playStep{before: obs[i], action: strings.TrimSpace(act), after: obs[i+1],
				fb: fb, pol: polarity(fb), sig: stateSig(obs[i])})
		}
	}
	a.window = a.steps[max(0, len(a.steps)-a.p.window):]
	if m := budgetRE.FindStringSubmatch(a.first); m != nil {
		a.budget = atoi(m[1] + m[2])
	}
	for _, q := range quoteRE.FindAllStringSubmatch(hint, -1) {
		a.quotes = append(a.quotes, q[1]+q[2])
	}
	items := validActions(a.cur)
	if len(items) == 0 {
		for i := len(obs) - 2; i >= 0 && len(items) == 0; i-- {
			items = validActions(obs[i])
		}
	}
	if len(items) == 0 {
		return "help"
	}
	a.parseTurn(items)
	a.setBracket(items)
	cands := a.expand(items)
	if len(cands) == 0 {
		return items[0]
	}
	if a.rng.Float64() < a.p.eps {
		return cands[a.rng.IntN(len(cands))].text
	}
	for i := range cands {
		a.score(&cands[i])
	}
	best := 0
	for i := range cands {
		if cands[i].score > cands[best].score {
			best = i
		}
	}
	return cands[best].text
}

func atoi(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}

// validActions reads the last "Valid actions: a | b" line.
func validActions(obs string) []string {
	const key = "Valid actions:"
	for end := len(obs); end > 0; {
		i := strings.LastIndex(obs[:end], key)
		if i < 0 {
			return nil
		}
		start := strings.LastIndexByte(obs[:i], '\n') + 1
		if strings.TrimSpace(obs[start:i]) != "" { // not at the start of a line
			end = i
			continue
		}
		line := obs[i+len(key):]
		if nl := strings.IndexByte(line, '\n'); nl >= 0 {
			line = line[:nl]
		}
		var out []string
		for _, it := range strings.Split(line, "|") {
			if t := strings.TrimSpace(it); t != "" {
				out = append(out, t)
			}
		}
		return out
	}
	return nil
}

func lastInt(s string) (int, bool) {
	ms := intRE.FindAllString(s, -1)
	if len(ms) == 0 {
		return 0, false
	}
	return atoi(ms[len(ms)-1]), true
}

func firstWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return strings.ToLower(f[0])
}

// feedback is the first line of an observation: what the last action did.
func feedback(obs string) string {
	line, _, _ := strings.Cut(obs, "\n")
	return strings.ToLower(line)
}

var negWords = []string{"wrong", "incorrect", "not ", "nothing", "no signal", "blocked", "refused", "error", "unrecognised", "invalid", " late", "fail", "cannot", "unknown"}
var posWords = []string{"correct", "found", "sounds", "success", "on time", "!"}

// polarity is -1 for negative feedback, +1 for positive, 0 for neutral.
func polarity(fb string) int {
	for _, w := range negWords {
		if strings.Contains(fb, w) {
			return -1
		}
	}
	for _, w := range posWords {
		if strings.Contains(fb, w) {
			return 1
		}
	}
	return 0
}

// stateSig is the part of an observation that describes the state (its
// last two lines after the feedback line), so that repeats of an action in
// the same state can be recognised.
func stateSig(obs string) string {
	lines := strings.Split(obs, "\n")
	if len(lines) > 1 {
		lines = lines[1:]
	}
	lines = lines[max(0, len(lines)-2):]
	for i, l := range lines {
		if acts := validActions(l); acts != nil { // listing order carries no state
			sort.Strings(acts)
			lines[i] = strings.Join(acts, "|")
		}
	}
	return strings.Join(lines, "\n")
}

// containsPhrase reports whether phrase occurs in s on word boundaries.
func containsPhrase(s, phrase string) bool {
	st, pt := tokens(s), tokens(phrase)
	if len(pt) == 0 {
		return false
	}
	for i := 0; i+len(pt) <= len(st); i++ {
		match := true
		for j := range pt {
			if st[i+j] != pt[j] {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// tokens splits text into lower-case alphanumeric words.
func tokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_'
	})
}

var beginsRE = regexp.MustCompile(`(?i)(?:begins|starts) with '([^']+)'`)

// hintBonus follows the hint: an action the hint quotes is preferred until
// it has been taken as often as quoted; quoted actions in order form a plan
// that is followed while the play stays on it; a quoted phrase inside an
// action ("row 3") and a quoted opening token ("begins with 'X'") help less.
func (a *agentCtx) hintBonus(c *candidate) float64 {
	if len(a.quotes) == 0 {
		return 0
	}
	s := 0.0
	onPlan := len(a.quotes) > 1 && len(a.steps) < len(a.quotes)
	for i, st := range a.steps {
		if i >= len(a.quotes) || !strings.EqualFold(a.quotes[i], st.action) {
			onPlan = false
		}
	}
	quoted, taken := 0, 0
	phrase := false
	for _, q := range a.quotes {
		if strings.EqualFold(q, c.text) {
			quoted++
		} else if containsPhrase(c.text, q) {
			phrase = true
		}
	}
	for _, st := range a.steps {
		if strings.EqualFold(st.action, c.text) {
			taken++
		}
	}
	switch {
	case onPlan && strings.EqualFold(a.quotes[len(a.steps)], c.text):
		s += 2.5
	case quoted > taken && len(a.steps) >= len(a.quotes):
		s += 1.5
	case quoted > taken:
		s += 0.5
	case phrase:
		s += 0.4
	}
	if m := beginsRE.FindStringSubmatch(a.hint); m != nil {
		if t := tokensAfterVerb(c.text); len(t) > 0 && strings.EqualFold(t[0], m[1]) {
			s += 1.0
		}
	}
	return s
}

// setBracket derives the numeric interval the remembered feedback and the
// hint allow (higher/lower comparisons, "between a and b" hints).
func (a *agentCtx) setBracket(items []string) {
	a.lo, a.hi = math.MinInt32, math.MaxInt32
	for _, it := range items {
		if m := rangeRE.FindStringSubmatch(it); m != nil {
			a.lo, a.hi = atoi(m[1]), atoi(m[2])
			a.bracket = true
		}
	}
	if m := betweenRE.FindStringSubmatch(a.hint); m != nil {
		lo, hi := atoi(m[1]), atoi(m[2])
		if lo > hi {
			lo, hi = hi, lo
		}
		a.lo, a.hi = max(a.lo, lo), min(a.hi, hi)
		a.bracket = true
	}
	for _, st := range a.window {
		n, ok := lastInt(st.action)
		if !ok {
			continue
		}
		fb := feedback(st.after)
		switch {
		case strings.Contains(fb, "or a lower") || strings.Contains(fb, "or lower"):
			a.hi = min(a.hi, n)
		case strings.Contains(fb, "higher than") || strings.Contains(fb, "at a higher") || strings.Contains(fb, "too low"):
			a.lo = max(a.lo, n+1)
		case strings.Contains(fb, "lower than") || strings.Contains(fb, "too high"):
			a.hi = min(a.hi, n-1)
		default:
			continue
		}
		a.bracket = true
	}
	if a.lo > a.hi { // contradictory memory: trust the newest bound only
		a.lo, a.hi = a.hi, a.lo
	}
}

// expand turns listed items into concrete candidates, filling "<integer>"
// placeholders from the number modules.
func (a *agentCtx) expand(items []string) []candidate {
	var out []candidate
	for _, it := range items {
		if placeholdRE.MatchString(it) {
			if strings.Contains(it, "...") { // a format description, not an action
				continue
			}
			base := strings.TrimSpace(rangeRE.ReplaceAllString(it, ""))
			v, ok := a.fillNumber(base)
			if !ok {
				continue
			}
			text := strings.TrimSpace(placeholdRE.ReplaceAllString(base, strconv.Itoa(v)))
			out = append(out, candidate{text: text, verb: firstWord(text), num: v, hasNum: true, tmpl: true})
			continue
		}
		c := candidate{text: it, verb: firstWord(it)}
		c.num, c.hasNum = lastInt(it)
		out = append(out, c)
	}
	return out
}

// fillNumber picks the number for a placeholder action: a sequence
// prediction, a function evaluation, or the bracket midpoint.
func (a *agentCtx) fillNumber(base string) (int, bool) {
	if m := seqMatch(a.cur); m != nil {
		var seq []int
		for _, f := range strings.Split(m[1], ",") {
			if t := strings.TrimSpace(f); t != "" {
				seq = append(seq, atoi(t))
			}
		}
		v := a.predictSequence(seq)
		if a.rng.Float64() < a.p.eps/2 { // a slip: off by one
			v++
		}
		return v, len(seq) > 0
	}
	if a.fnTask && firstWord(base) == "answer" {
		return a.fnValue, true
	}
	if a.bracket && a.lo <= a.hi && a.hi-a.lo < 1<<30 {
		frac := 0.5
		if a.rng.Float64() < 2*a.p.eps {
			frac = 0.2 + 0.6*a.rng.Float64()
		}
		return a.lo + int(frac*float64(a.hi-a.lo)+0.5), true
	}
	return 0, false
}

func (a *agentCtx) score(c *candidate) {
	s := 0.05 * a.rng.Float64()
	for _, st := range a.steps {
		if st.action != c.text {
			continue
		}
		same := st.sig == a.curSig
		if same {
			s -= 1.0
		}
		if st.pol < 0 {
			if same {
				s -= 2.0
			} else {
				s -= 0.8 // failed in another state: it may work here
			}
		}
	}
	// Evidence from remembered feedback about what an action's object is.
	for _, st := range a.window {
		pol := st.pol
		if pol == 0 || st.action == c.text {
			continue
		}
		fields := strings.Fields(st.action)
		if len(fields) >= 2 && strings.ToLower(fields[0]) == fields[0] {
			// Evidence about an object ("row 3") supports or rules out
			// actions on it in proportion to how much of the action it covers.
			if obj := strings.Join(fields[1:], " "); containsPhrase(c.text, obj) {
				if args := tokens(c.text); len(args) > 1 {
					s += 1.5 * float64(pol) * float64(len(tokens(obj))) / float64(len(args)-1)
				}
			}
		} else if len(fields) >= 2 && pol < 0 && strings.Fields(c.text)[0] == fields[0] {
			s += 0.5 // wrong about a subject: the other statement about it
		}
	}
	if commitVerbs[c.verb] {
		s -= 0.8
		if a.budget > 0 && a.turn >= a.budget-1 {
			s += 1.5
		}
	}
	s += a.hintBonus(c)
	if c.hasNum && a.bracket && !c.tmpl {
		switch {
		case c.num < a.lo || c.num > a.hi:
			s -= 2
		case commitVerbs[c.verb]:
			if a.lo == a.hi {
				s += 2.5
			}
		case a.lo == a.hi:
			s -= 0.5
		default:
			mid := float64(a.lo+a.hi) / 2
			s += 1 - math.Abs(float64(c.num)-mid)/float64(a.hi-a.lo+1)
		}
	}
	s += a.consistency(c)
	s += a.navigate(c)
	s += a.economics(c)
	s += a.probeFunction(c)
	c.score = s
}

// consistency keeps guesses consistent with remembered exact-match counts
// (a Mastermind-style constraint).
func (a *agentCtx) consistency(c *candidate) float64 {
	pen := 0.0
	mine := tokensAfterVerb(c.text)
	for _, st := range a.window {
		m := exactRE.FindStringSubmatch(st.fb)
		if m == nil || firstWord(st.action) != c.verb {
			continue
		}
		prev := tokensAfterVerb(st.action)
		same := 0
		for i := 0; i < len(prev) && i < len(mine); i++ {
			if strings.EqualFold(prev[i], mine[i]) {
				same++
			}
		}
		if same != atoi(m[1]) {
			pen -= 2.5
		}
	}
	return pen
}

func tokensAfterVerb(s string) []string {
	f := strings.Fields(s)
	if len(f) < 2 {
		return nil
	}
	return strings.FieldsFunc(strings.Join(f[1:], " "), func(r rune) bool { return r == '-' || r == ' ' || r == ',' })
}

// navigate heads toward a stated goal position and away from cells already
// visited, for direction actions.
func (a *agentCtx) navigate(c *candidate) float64 {
	d, ok := directions[strings.ToLower(c.text)]
	if !ok {
		return 0
	}
	pm := posRE.FindStringSubmatch(a.cur)
	gm := goalRE.FindStringSubmatch(a.cur)
	if pm == nil || gm == nil {
		return 0
	}
	x, y := atoi(pm[1]), atoi(pm[2])
	gx, gy := atoi(gm[1]), atoi(gm[2])
	nx, ny := x+d[0], y+d[1]
	s := 0.0
	if abs(nx-gx)+abs(ny-gy) < abs(x-gx)+abs(y-gy) {
		s += 0.6
	} else {
		s -= 0.2
	}
	visits := 0
	for _, o := range a.allObs {
		if m := posRE.FindStringSubmatch(o); m != nil && atoi(m[1]) == nx && atoi(m[2]) == ny {
			visits++
		}
	}
	return s - 0.7*float64(visits)
}

// economics compares stated costs, values, budgets and deadlines: skipping
// unaffordable options (depth >= 2), value per cost (depth >= 3, value only
// at depth 2), earliest deadline first (depth >= 3), and stopping once a
// stated target is met.
func (a *agentCtx) economics(c *candidate) float64 {
	s := 0.0
	opts := a.opts
	if len(opts) > 0 {
		obj := strings.TrimSpace(strings.TrimPrefix(c.text, c.verb))
		var ranks []float64
		mine := -1.0
		cost := 0
		for _, o := range opts {
			cst, val := float64(atoi(o[2])), float64(atoi(o[3]))
			key := val
			if a.p.depth >= 3 {
				key = val / math.Max(1, cst)
			}
			ranks = append(ranks, key)
			if strings.EqualFold(o[1], obj) {
				mine, cost = key, atoi(o[2])
			}
		}
		if mine >= 0 {
			if a.budgetLeft >= 0 && a.p.depth >= 2 && cost > a.budgetLeft {
				s -= 2.5
			}
			if a.p.depth >= 2 {
				better := 0
				for _, r := range ranks {
					if r > mine {
						better++
					}
				}
				s += 0.8 * (1 - float64(better)/float64(len(ranks)))
			}
		}
		if c.verb == "finish" {
			if a.goalMet {
				s += 3
			}
		}
	}
	if a.p.depth >= 3 {
		dls := a.deadlines
		if len(dls) > 0 {
			obj := strings.TrimSpace(strings.TrimPrefix(c.text, c.verb))
			var dues []int
			mine := -1
			waiting := a.waiting
			for _, d := range dls {
				if !strings.Contains(waiting, " "+d[1]+" ") {
					continue // already run
				}
				dues = append(dues, atoi(d[3]))
				if d[1] == obj {
					mine = atoi(d[3])
				}
			}
			if mine >= 0 {
				sort.Ints(dues)
				s += 1.0 * (1 - float64(sort.SearchInts(dues, mine))/float64(len(dues)))
			}
		}
	}
	return s
}

// parseTurn parses what every candidate's scoring reads from the current
// and first observations, once per turn.
func (a *agentCtx) parseTurn(items []string) {
	a.curSig = stateSig(a.cur)
	lowCur, lowFirst := strings.ToLower(a.cur), strings.ToLower(a.first)
	// Substring tests guard the regular expressions: most observations
	// mention none of these, and the agent answers every turn of every play.
	if strings.Contains(a.cur, "(cost ") || strings.Contains(a.cur, "(price ") {
		a.opts = optionRE.FindAllStringSubmatch(a.cur, -1)
	}
	a.budgetLeft = -1
	if strings.Contains(lowCur, "budget left") {
		if m := budgetLeftRE.FindStringSubmatch(a.cur); m != nil {
			a.budgetLeft = atoi(m[1])
		}
	}
	if strings.Contains(lowCur, "so far") && strings.Contains(lowFirst, "at least") {
		if sf, tg := soFarRE.FindStringSubmatch(a.cur), atLeastRE.FindStringSubmatch(a.first); sf != nil && tg != nil {
			a.goalMet = atoi(sf[1]) >= atoi(tg[1])
		}
	}
	if a.p.depth >= 3 && strings.Contains(a.first, " due by ") {
		a.deadlines = deadlineRE.FindAllStringSubmatch(a.first, -1)
	}
	a.waiting = " " + strings.Join(items, " ") + " "
	if strings.Contains(lowFirst, "report f(") && reportRE.MatchString(a.first) {
		a.fnTask = true
		a.pts = a.functionPoints()
		a.fnValue, a.fnSure = a.predictFunction()
	}
}

func seqMatch(obs string) []string {
	if !strings.Contains(strings.ToLower(obs), "sequence so far") {
		return nil
	}
	return sequenceRE.FindStringSubmatch(obs)
}
