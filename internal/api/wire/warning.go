package wire

import (
	"strconv"
	"strings"
)

// WarningHeader is a Warning header's value (RFC 9110's obsoleted but still read
// warn-code 299, "miscellaneous persistent warning", as Kubernetes sends).
func WarningHeader(text string) string {
	return "299 - " + strconv.Quote(text)
}

// WarningText is the text of a Warning header's value, or "" when it is not one.
func WarningText(header string) string {
	text, err := strconv.Unquote(strings.TrimPrefix(header, "299 - "))
	if err != nil {
		return ""
	}
	return text
}
