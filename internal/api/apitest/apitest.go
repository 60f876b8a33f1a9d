// Package apitest checks HTTP exchanges with a manifold node against the API's OpenAPI
// document: the unit tests of internal/api and the lab tests against a live node use
// it, so that the handlers and the document cannot drift apart.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/manifoldlb/manifold/internal/api"
)

// Checker validates exchanges and remembers which documented responses it has seen.
type Checker struct {
	doc    *openapi3.T
	router routers.Router

	mu   sync.Mutex
	seen map[string]bool // "GET /api/v1/services/{name} 404"
}

// The status page (GET /) is text/html: its body is checked as a string, as the
// metrics' text is.
func init() {
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.RegisteredBodyDecoder("text/plain"))
}

// New loads and validates the document.
func New() (*Checker, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.json is not a valid OpenAPI 3 document: %w", err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &Checker{doc: doc, router: router, seen: map[string]bool{}}, nil
}

// Exchange is one request and its response.
type Exchange struct {
	Status int
	Header http.Header
	Body   []byte
	// DocAccepts tells whether the document accepts the request (parameters and body);
	// RequestProblem says why not.
	DocAccepts     bool
	RequestProblem error
}

// Do sends req (its body is body) with client and checks the exchange: the request
// must match a documented operation, and the response must be documented for it, its
// status included, with a body of the documented schema.
func (c *Checker) Do(client *http.Client, req *http.Request, body []byte) (*Exchange, error) {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s is not in the document: %w", req.Method, req.URL.Path, err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true,
		// the document's defaults are the server's to apply: a checker that filled them into the
		// body it forwards would hide a server that forgot one
		SkipSettingDefaults: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	req.Body = io.NopCloser(bytes.NewReader(body))
	reqErr := openapi3filter.ValidateRequest(context.Background(), in)

	req.Body = io.NopCloser(bytes.NewReader(body))
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := &Exchange{Status: resp.StatusCode, Header: resp.Header, Body: respBody, DocAccepts: reqErr == nil, RequestProblem: reqErr}
	rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: opts}
	rin.SetBodyBytes(respBody)
	if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
		return out, fmt.Errorf("%s %s → %d does not match the document: %w\n%s", req.Method, req.URL.Path, resp.StatusCode, err, respBody)
	}
	c.mu.Lock()
	c.seen[fmt.Sprintf("%s %s %d", req.Method, route.Path, resp.StatusCode)] = true
	c.mu.Unlock()
	return out, nil
}

// Unseen lists the documented responses no exchange has produced yet, as
// "METHOD PATH STATUS".
func (c *Checker) Unseen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code := range op.Responses.Map() {
				if _, err := strconv.Atoi(code); err != nil {
					continue
				}
				if k := fmt.Sprintf("%s %s %s", method, path, code); !c.seen[k] {
					out = append(out, k)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
