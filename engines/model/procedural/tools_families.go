package procedural

import "fmt"

// Tool-use workflows (docs/method.md step 3, tool-use template): 3-5 atomic
// instructions revealed one at a time on a ToolUseEnv backend. Identifiers
// and amounts come from the document's numbers where it has them.

func bankParams(g *gen) Params {
	n := pick(g, [5]int{3, 3, 4, 4, 5})
	payees := g.names(4)
	chk := fmt.Sprintf("CHK-%d", 1000+g.number(10, 999))
	sav := fmt.Sprintf("SAV-%d", 2000+g.number(10, 999))
	if sav[4:] == chk[4:] {
		sav = "SAV-2999"
	}
	ids := make([]string, 4)
	amounts := make([]int, 4)
	for i := range ids {
		ids[i] = fmt.Sprintf("INV-%d", 100+10*i+g.intn(0, 9))
		amounts[i] = 10 * g.intn(5, 30)
	}
	return Params{
		"instructions": n, "checking": chk, "savings": sav, "payees": payees,
		"invoices": ids, "amounts": amounts, "transfer": amounts[0] + 10*g.intn(1, 10),
		"max_turns": n + pick(g, [5]int{3, 2, 2, 2, 1}) + max(0, n-3),
	}
}

func bankHint(p Params) string {
	payees := pStrs(p, "payees")
	ids := pStrs(p, "invoices")
	if pInt(p, "instructions") >= 4 && len(payees) > 2 && len(ids) > 2 {
		return fmt.Sprintf("Transfers go from '%s' to '%s'; the %s invoice is '%s'.",
			pStr(p, "savings"), pStr(p, "checking"), payees[2], ids[2])
	}
	return fmt.Sprintf("Transfers go from '%s' to '%s', never the other way.", pStr(p, "savings"), pStr(p, "checking"))
}

func retailParams(g *gen) Params {
	n := pick(g, [5]int{3, 3, 4, 4, 5})
	items := g.names(4)
	street := g.name()
	order := fmt.Sprintf("ORD-%d", 5000+g.number(10, 999))
	other := fmt.Sprintf("ORD-%d", 7000+g.intn(10, 999))
	return Params{
		"instructions": n, "items": items, "order": order, "other": other,
		"address":  fmt.Sprintf("%d %s Road", g.number(2, 99), street),
		"coupon":   fmt.Sprintf("SAVE%d", 5*g.intn(2, 6)),
		"quantity": g.intn(2, 6), "store": g.name(),
		"max_turns": n + pick(g, [5]int{3, 2, 2, 2, 1}) + 2*min(1, max(0, n-3)),
	}
}

func retailHint(p Params) string {
	items := pStrs(p, "items")
	if pInt(p, "instructions") >= 4 {
		return fmt.Sprintf("The coupon on the receipt of '%s' is '%s'.", pStr(p, "other"), pStr(p, "coupon"))
	}
	return fmt.Sprintf("Every change is to order '%s'; the item to remove is '%s'.", pStr(p, "order"), items[1])
}

func triageParams(g *gen) Params {
	n := pick(g, [5]int{3, 3, 4, 4, 5})
	topics := g.names(5)
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = fmt.Sprintf("TCK-%d", 300+20*i+g.intn(0, 19))
	}
	return Params{
		"instructions": n, "topics": topics, "tickets": ids,
		"priority":   []string{"low", "medium", "high", "urgent"}[g.rng.IntN(4)],
		"team":       []string{"billing", "network", "accounts", "hardware"}[g.rng.IntN(4)],
		"team2":      []string{"billing", "network", "accounts", "hardware"}[g.rng.IntN(4)],
		"resolution": []string{"fixed", "duplicate", "wont_fix"}[g.rng.IntN(3)],
		"queue":      []string{"inbox", "escalations"}[g.rng.IntN(2)], "desk": g.name(),
		"max_turns": n + pick(g, [5]int{3, 2, 2, 2, 1}) + min(1, max(0, n-3)),
	}
}

func triageHint(p Params) string {
	topics := pStrs(p, "topics")
	ids := pStrs(p, "tickets")
	if pInt(p, "instructions") >= 4 && len(topics) > 2 && len(ids) > 2 {
		return fmt.Sprintf("The ticket about %s is '%s'.", topics[2], ids[2])
	}
	return fmt.Sprintf("Priorities and teams apply to '%s' only.", ids[0])
}
