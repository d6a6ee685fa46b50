package schemas

import "fmt"

// ExpandPrompts returns, for each message of msgs, its call's full prompt
// token ids (decoding PromptShared and PromptTokenIDs): nil for messages
// that are not assistant turns or whose server reported no prompt ids.
// Errors: a PromptShared beyond the previous turn's prompt and
// completion, or a turn that reports PromptShared > 0 with no previous
// prompt, naming the message index.
func ExpandPrompts(msgs []Message) ([][]int64, error) {
	out := make([][]int64, len(msgs))
	var prev []int64 // previous assistant turn's prompt ++ completion
	for i, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		if len(m.PromptTokenIDs) == 0 && m.PromptShared == 0 {
			prev = nil
			continue
		}
		if m.PromptShared < 0 || int(m.PromptShared) > len(prev) {
			return nil, fmt.Errorf("messages[%d]: field prompt_shared %d exceeds the %d tokens of the previous turn's prompt and completion", i, m.PromptShared, len(prev))
		}
		full := make([]int64, 0, int(m.PromptShared)+len(m.PromptTokenIDs))
		full = append(append(full, prev[:m.PromptShared]...), m.PromptTokenIDs...)
		out[i] = full
		prev = append(append(make([]int64, 0, len(full)+len(m.CompletionTokenIDs)), full...), m.CompletionTokenIDs...)
	}
	return out, nil
}

// SharePrompt delta-codes prompt (one call's full prompt ids) against
// prev (the previous assistant turn's prompt ++ completion ids): the
// length of their common prefix and the rest of prompt, the
// PromptShared and PromptTokenIDs of Message.
func SharePrompt(prev, prompt []int64) (int64, []int64) {
	n := 0
	for n < len(prev) && n < len(prompt) && prev[n] == prompt[n] {
		n++
	}
	return int64(n), prompt[n:]
}
