package etl

import (
	"strconv"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// Error is the typed rejection of a batch. Code is one of [codes.InvalidJSON] (the body is
// absent, not UTF-8, not well-formed JSON, not an array, nests deeper than the limit, has
// trailing data, or some object repeats a member name), [codes.InvalidRecord] (an array element
// is not an object, or a record's id, a field name or an AMOUNT value is invalid) and
// [codes.BatchTooLarge] (the array holds more records than the configured maximum); Index is the
// zero-based index of the offending record for codes.InvalidRecord and -1 otherwise. Match it
// with errors.As(err, &target) where target is a *Error. The Error text depends only on Code
// and Index and never contains payload data, so it is safe to log.
type Error struct {
	Code  string
	Index int
}

// Error returns a fixed description of the rejection.
func (e *Error) Error() string {
	var text string
	switch e.Code {
	case codes.InvalidJSON:
		text = "etl: request body is not a valid JSON array of records"
	case codes.InvalidRecord:
		text = "etl: invalid record"
	case codes.BatchTooLarge:
		text = "etl: batch has too many records"
	default:
		text = "etl: rejected batch"
	}
	if e.Index >= 0 {
		text += " at index " + strconv.Itoa(e.Index)
	}
	return text
}

func invalidJSON() *Error        { return &Error{Code: codes.InvalidJSON, Index: -1} }
func batchTooLarge() *Error      { return &Error{Code: codes.BatchTooLarge, Index: -1} }
func invalidRecord(i int) *Error { return &Error{Code: codes.InvalidRecord, Index: i} }
