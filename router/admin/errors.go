package admin

import (
	"strconv"

	"frontdoor/adapters"
)

// The operator surface's error answers, in the OpenAI envelope.

func errForbidden() *adapters.APIError {
	return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_forbidden",
		Message: "admin endpoints need the admin bearer token (Authorization: Bearer <admin.token_env>), a session from POST /admin/login, or the admin listener (admin.listen)"}
}

func errLoginOff() *adapters.APIError {
	return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_login_off",
		Message: "login needs an admin token (admin.token_env); none is set"}
}

func errHostForbidden(host string) *adapters.APIError {
	return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_host_forbidden",
		Message: "admin without a token answers only to an IP address or localhost in Host (got " + strconv.Quote(host) + "): use http://<ip>:<port>/"}
}

func errCrossOrigin(origin string) *adapters.APIError {
	msg := "admin without a token refuses requests a browser sends for another site"
	if origin != "" {
		msg = "admin without a token refuses requests from another origin (" + strconv.Quote(origin) + ")"
	}
	return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "admin_cross_origin", Message: msg}
}

func errUnknownPath(msg string) *adapters.APIError {
	return &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "unknown_url", Message: msg}
}

func errCacheOff() *adapters.APIError {
	return &adapters.APIError{Status: 409, Type: adapters.TypeInvalidRequest, Code: "cache_off", Message: "the cache is off (cache.backend: off)"}
}

func errStoreUnavailable(err error) *adapters.APIError {
	return &adapters.APIError{Status: 503, Type: adapters.TypeUnavailable, Code: "store_unavailable", Message: "cache store: " + err.Error()}
}

func errEntryNotFound(id string) *adapters.APIError {
	return &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "entry_not_found", Message: "no cache entry " + strconv.Quote(id)}
}

func errNodeNotFound(name string) *adapters.APIError {
	return &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "node_not_found", Message: "no node " + strconv.Quote(name)}
}

func errImportRefused(err error) *adapters.APIError {
	return &adapters.APIError{Status: 400, Type: adapters.TypeInvalidRequest, Code: "import_refused", Message: err.Error()}
}

// errImportFailed is an import the store failed: the message is the
// store's error, as it was.
func errImportFailed(err error) *adapters.APIError {
	return &adapters.APIError{Status: 503, Type: adapters.TypeInvalidRequest, Code: "store_unavailable", Message: err.Error()}
}

func errNotServing() *adapters.APIError {
	return &adapters.APIError{Status: 409, Type: adapters.TypeInvalidRequest, Code: "not_serving", Message: "the gateway is not serving yet"}
}

func errWarmNotFound(id string) *adapters.APIError {
	return &adapters.APIError{Status: 404, Type: adapters.TypeNotFound, Code: "warm_not_found", Message: "no warm-up job " + strconv.Quote(id)}
}

func errQuestionsHidden() *adapters.APIError {
	return &adapters.APIError{Status: 403, Type: adapters.TypePermission, Code: "questions_hidden",
		Message: "the hot list holds clients' prompts, shown only with logging.log_prompts or admin.show_cached_questions: set admin.show_cached_questions: true to export them"}
}
