package procedural

import (
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Document is one grounding document as the design stage passes it in the
// "spade.doc" Meta key (a JSON list of these).
type Document struct {
	// DocID is the corpus row's doc_id; it seeds the design.
	DocID string `json:"doc_id"`
	// Title is the document's title; no design may contain it.
	Title string `json:"title"`
	// Domain is the corpus domain label ("" for none); the first
	// document's is named in the design's response.
	Domain string `json:"domain"`
	// Text is the document text the terms are drawn from; the design stage
	// passes an excerpt of at most design.DocExcerptChars (6000) code
	// points, plus " [...]" when the document was cut.
	Text string `json:"text"`
}

// Terms are the salient words and numbers taken from the grounding
// documents; families weave them into names, items, story and values so the
// environment is visibly grounded (docs/method.md step 1) without naming the
// document itself.
type Terms struct {
	// Names are distinct display terms, most salient first (capitalised
	// words, then long words), each [A-Za-z][A-Za-z0-9]{2,17}.
	Names []string
	// Numbers are distinct integers 2..999 found in the text, in order of
	// first appearance.
	Numbers []int
}

var (
	wordRE   = regexp.MustCompile(`[A-Za-z][A-Za-z0-9]*`)
	numberRE = regexp.MustCompile(`\b\d{1,6}\b`)
)

// stopwords are frequent English words that carry no domain meaning; a term
// made of one of them would not show the document's content.
var stopwords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`the and for are but not you all any can had her was one our out day get has him his how man new now old see two way who boy did its let put say she too use that with have this will your from they know want been good much some time very when come here just like long make many more only over such take than them well were what where which while about after again also before being below between both could does doing down during each every first from further into itself might most must other once same should since some still their there these those through under until upon within without would years because however therefore although though whose whom they then this that these been being often used using known called usually other another either neither among across along around toward towards example examples include includes including such several various different number numbers section chapter figure table page pages introduction conclusion result results study studies paper article document documents method methods data value values also thus hence may can will shall`) {
		stopwords[w] = true
	}
}

// fallbackNames complete the term list when documents are short, so every
// family always has enough distinct names. They are plain English nouns, not
// document content.
var fallbackNames = []string{
	"Amber", "Basalt", "Cobalt", "Delta", "Ember", "Flint", "Garnet", "Harbor",
	"Indigo", "Jasper", "Kestrel", "Lumen", "Marble", "Nectar", "Onyx", "Pylon",
	"Quartz", "Russet", "Sable", "Tundra", "Umber", "Vertex", "Willow", "Zephyr",
}

// ExtractTerms picks up to maxNames salient names and the numbers of docs,
// deterministically (ties broken by first appearance, never map order).
// Words equal to a document title (case-insensitively) are excluded so a
// one-word title can never leak into an environment. The result always has
// at least maxNames names: fallbackNames fill the gap.
func ExtractTerms(docs []Document, maxNames int) Terms {
	return extractTerms(docs, maxNames, false)
}

// extractTerms is ExtractTerms; with banTitleWords every word of a title is
// excluded too, the fallback when single terms happened to spell a title.
func extractTerms(docs []Document, maxNames int, banTitleWords bool) Terms {
	type cand struct {
		display string
		score   int
		first   int
	}
	banned := map[string]bool{}
	for _, d := range docs {
		t := strings.ToLower(strings.TrimSpace(d.Title))
		if t != "" {
			banned[t] = true
		}
		if banTitleWords {
			for _, w := range wordRE.FindAllString(t, -1) {
				banned[w] = true
			}
		}
	}
	byKey := map[string]*cand{}
	var order []string
	pos := 0
	var numbers []int
	seenNum := map[int]bool{}
	for _, d := range docs {
		text := d.Text
		for _, loc := range wordRE.FindAllStringIndex(text, -1) {
			w := text[loc[0]:loc[1]]
			pos++
			if len(w) < 4 || len(w) > 18 {
				continue
			}
			key := strings.ToLower(w)
			if stopwords[key] || banned[key] || !hasLetters(w) {
				continue
			}
			score := 1
			if unicode.IsUpper(rune(w[0])) && !sentenceStart(text, loc[0]) {
				score += 4
			}
			if len(w) >= 8 {
				score += 2
			}
			c, ok := byKey[key]
			if !ok {
				c = &cand{display: displayForm(w), first: pos}
				byKey[key] = c
				order = append(order, key)
			}
			c.score += score
		}
		for _, m := range numberRE.FindAllString(text, -1) {
			n, err := strconv.Atoi(m)
			if err != nil || n < 2 || n > 999 || seenNum[n] {
				continue
			}
			seenNum[n] = true
			numbers = append(numbers, n)
		}
	}
	cands := make([]*cand, 0, len(order))
	for _, k := range order {
		cands = append(cands, byKey[k])
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].score != cands[j].score {
			return cands[i].score > cands[j].score
		}
		return cands[i].first < cands[j].first
	})
	var names []string
	taken := map[string]bool{}
	add := func(n string) {
		k := strings.ToLower(n)
		if taken[k] || banned[k] {
			return
		}
		// A name that is a prefix of another (Cell/Cells) would make
		// substring-based feedback ambiguous.
		for t := range taken {
			if strings.HasPrefix(t, k) || strings.HasPrefix(k, t) {
				return
			}
		}
		taken[k] = true
		names = append(names, n)
	}
	for _, c := range cands {
		if len(names) >= maxNames {
			break
		}
		add(c.display)
	}
	for _, f := range fallbackNames {
		if len(names) >= maxNames {
			break
		}
		add(f)
	}
	return Terms{Names: names, Numbers: numbers}
}

func hasLetters(w string) bool {
	n := 0
	for _, r := range w {
		if unicode.IsLetter(r) {
			n++
		}
	}
	return n >= 3
}

// sentenceStart reports whether the word at byte offset i opens a sentence,
// where capitalisation says nothing about salience.
func sentenceStart(text string, i int) bool {
	j := i - 1
	for j >= 0 && (text[j] == ' ' || text[j] == '\t' || text[j] == '"' || text[j] == '(' || text[j] == '\'') {
		j--
	}
	if j < 0 {
		return true
	}
	switch text[j] {
	case '.', '!', '?', '\n', ':', '#', '*', '-':
		return true
	}
	return false
}

// displayForm capitalises the first letter so terms read as proper names in
// stories and action lists.
func displayForm(w string) string {
	if w == "" {
		return w
	}
	return strings.ToUpper(w[:1]) + w[1:]
}
