package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// A notice is the one-line status an action's redirect asks its target page
// to show (?notice=<code>). The query names only a code: the page shows the
// code's fixed text from notices, and nothing for an unknown code, so a
// link can never put its own words on a console page. The one variable
// part, the count of a bulk cancellation (?cancelled=<n>), is shown only
// as a decimal number from 0 to the bulk cancel cap.
const (
	noticeCancelled      = "cancelled"
	noticeNotCancelled   = "not-cancelled"
	noticeReplayed       = "replayed"
	noticeReplayRepeated = "replay-repeated"
	noticeBulkCancelled  = "bulk-cancelled"
	noticeBulkCountParam = "cancelled"
)

// notices are the fixed texts of the notice codes (but noticeBulkCancelled,
// whose text has the count: noticeText).
var notices = map[string]string{
	noticeCancelled:    "Cancelled.",
	noticeNotCancelled: "Not cancelled: the job had already ended (its state is below).",
	noticeReplayed:     "Replay created: this job replays the one named under Replay lineage.",
	noticeReplayRepeated: "This form already replayed that job; this is that replay " +
		"(no new job was created).",
}

// noticeText is the text of the notice q asks for: the fixed text of a
// known code, "Cancelled <n> jobs." for a bulk cancellation whose count is
// a decimal 0..bulkCap, and "" for anything else.
func noticeText(q url.Values, bulkCap int) string {
	code := q.Get("notice")
	if code == noticeBulkCancelled {
		s := q.Get(noticeBulkCountParam)
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > bulkCap || strconv.Itoa(n) != s {
			return ""
		}
		return "Cancelled " + strconv.Itoa(n) + " jobs."
	}
	return notices[code]
}

// withNotice returns target (a console path, with or without a query) with
// the notice code added.
func withNotice(target, code string) string {
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	return target + sep + "notice=" + url.QueryEscape(code)
}

// redirectWithNotice answers a form POST with 303 to target showing code.
func redirectWithNotice(w http.ResponseWriter, r *http.Request, target, code string) {
	http.Redirect(w, r, withNotice(target, code), http.StatusSeeOther)
}
