package httpapi

import (
	"mime"
	"net/http"
	"strings"

	"github.com/mightyetl/mightyetl/internal/codes"
)

// requireJSON refuses a request that carries a body unless it declares
// Content-Type: application/json: 415 etl_unsupported_media_type. A
// browser can send a cross-site form or no-cors fetch only as
// application/x-www-form-urlencoded, multipart/form-data or text/plain
// without a CORS preflight, so requiring application/json keeps a page on
// another site from posting with a victim's cached Basic credentials.
//
// Rules: exactly one Content-Type field whose media type is
// application/json (case-insensitive). Parameters are allowed; a charset
// parameter must be utf-8 (JSON is UTF-8, RFC 8259). Structured-syntax
// suffixes (application/*+json) are refused: the API has one request
// representation, and no +json type means a plain record array. A request
// without a body (Content-Length: 0) passes, so a bodiless POST such as a
// cancellation needs no Content-Type; an empty body then fails as the route
// decides (400 etl_invalid_json where a body is required).
//
// Every POST route under /api/ is wrapped in it, after authentication (and,
// on /api/ops/, the operator check) and before the handler reads anything:
// the owner's routes (an apiHandler, through NewHandler's post) and the
// operator's (an opsHandler, through registerConsole's ops). The HTML forms
// under /console/ are not JSON routes and keep their own form handling.
func requireJSON[P any, H ~func(http.ResponseWriter, *http.Request, P)](h H) H {
	return func(w http.ResponseWriter, r *http.Request, who P) {
		if r.ContentLength != 0 && !isJSONContentType(r.Header) {
			writeProblem(w, r, codes.UnsupportedMediaType)
			return
		}
		h(w, r, who)
	}
}

// isJSONContentType reports whether h holds exactly one Content-Type field
// naming application/json, with a UTF-8 charset or none.
func isJSONContentType(h http.Header) bool {
	vals := h.Values("Content-Type")
	if len(vals) != 1 {
		return false
	}
	if vals[0] == "application/json" {
		return true // what every client sends; ParseMediaType would agree
	}
	mt, params, err := mime.ParseMediaType(vals[0])
	if err != nil || mt != "application/json" {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return true
}
