package clientcontract_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/mightyetl/mightyetl/client"
	errcodes "github.com/mightyetl/mightyetl/internal/codes"
)

// operationMethods maps every operationId of docs/openapi.yaml under
// /api/etl/ to the Client method that calls it.
var operationMethods = map[string]string{
	"submitJob":           "Submit",
	"listJobs":            "List",
	"getJob":              "Get",
	"cancelJob":           "Cancel",
	"replayJob":           "Replay",
	"processSync":         "Process",
	"submitDiagnosticJob": "SubmitDiagnostic",
	"createUpload":        "CreateUpload",
	"getUpload":           "GetUpload",
	"putUploadPart":       "PutUploadPart",
	"submitUpload":        "SubmitUpload",
	"deleteUpload":        "DeleteUpload",
	"listBadRecords":      "BadRecords",
}

// declaredCodes returns the string values of the ErrorCode constants
// declared in the package's source.
func declaredCodes(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../client/error.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || vs.Type == nil || len(vs.Values) != 1 {
			return true
		}
		if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "ErrorCode" || !vs.Names[0].IsExported() {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
			s, _ := strconv.Unquote(lit.Value)
			out[s] = true
		}
		return true
	})
	return out
}

// TestClientCoversTheContract keeps the hand-written client and
// docs/openapi.yaml in step: every operation under /api/etl/ has a Client
// method (and no mapping names an operation that is gone), and every
// errorCode of the Problem schema is a declared ErrorCode constant.
func TestClientCoversTheContract(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeFor[*client.Client]()
	seen := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		if !strings.HasPrefix(path, "/api/etl/") {
			continue
		}
		for method, op := range item.Operations() {
			name, ok := operationMethods[op.OperationID]
			if !ok {
				t.Errorf("%s %s (%s) has no client method", method, path, op.OperationID)
				continue
			}
			seen[op.OperationID] = true
			if _, ok := typ.MethodByName(name); !ok {
				t.Errorf("%s: Client has no method %s", op.OperationID, name)
			}
		}
	}
	for id := range operationMethods {
		if !seen[id] {
			t.Errorf("operation %s is no longer in docs/openapi.yaml", id)
		}
	}
	declared := declaredCodes(t)
	codes := doc.Components.Schemas["Problem"].Value.Properties["errorCode"].Value.Enum
	if len(codes) < 30 {
		t.Fatalf("only %d codes in the Problem schema", len(codes))
	}
	for _, c := range codes {
		if !declared[c.(string)] {
			t.Errorf("errorCode %s has no client constant", c)
		}
	}
	// The client mirrors the code table exactly: every problem and NATS
	// rejection code, and only its own etl_unexpected_response besides.
	table := map[string]bool{string(client.CodeUnexpectedResponse): true}
	for _, c := range slices.Concat(errcodes.Problems, errcodes.Rejections) {
		table[c] = true
	}
	for c := range declared {
		if !table[c] {
			t.Errorf("client constant %s is not in internal/codes", c)
		}
	}
	for c := range table {
		if !declared[c] {
			t.Errorf("code %s of internal/codes has no client constant", c)
		}
	}
	var statuses []string
	for _, s := range doc.Components.Schemas["JobStatus"].Value.Enum {
		statuses = append(statuses, s.(string))
	}
	want := []string{string(client.StatusPending), string(client.StatusRunning), string(client.StatusSucceeded), string(client.StatusFailed), string(client.StatusCancelled)}
	if !slices.Equal(statuses, want) {
		t.Errorf("JobStatus enum %v, client %v", statuses, want)
	}
}
