package intake

import "github.com/mightyetl/mightyetl/internal/etl"

// Diagnostic failure modes (DiagnosticSpec.FailWith); see etl.ParseDiagnostic.
const (
	FailWithTransient = etl.FailWithTransient
	FailWithPermanent = etl.FailWithPermanent
)

// MaxDiagnosticDuration bounds durationMillis (24 h).
const MaxDiagnosticDuration = etl.MaxDiagnosticDuration

// DiagnosticSpec is a validated diagnostic job request.
type DiagnosticSpec = etl.DiagnosticSpec

// ParseDiagnostic is etl.ParseDiagnostic (the one parser the intake and the
// worker share), failing with this package's *Error of the same code.
// Safe for concurrent use.
func ParseDiagnostic(body []byte, maxRecords int) (DiagnosticSpec, error) {
	spec, err := etl.ParseDiagnostic(body, maxRecords)
	if err != nil {
		return DiagnosticSpec{}, fromETL(err)
	}
	return spec, nil
}
