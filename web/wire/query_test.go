package wire

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// QueryValues reads one parameter as url.ParseQuery does.
func TestQueryValuesReadsOneParameterAsParseQuery(t *testing.T) {
	for _, raw := range []string{
		"", "subscribe=a", "subscribe=a&subscribe=b", "token=x&subscribe=a%26b&other=1&subscribe=c+d",
		"subscribe=", "subscribe", "subscrib%65=e", "&&subscribe=a&", "subscribe=a=b", "x=1",
		"subscribe=%E2%82%AC&subscribe=%2B",
	} {
		got, ok, err := QueryValues(raw, "subscribe")
		require.NoError(t, err, raw)
		want, perr := url.ParseQuery(raw)
		require.NoError(t, perr, raw)
		_, present := want["subscribe"]
		require.Equal(t, present, ok, raw)
		require.Equal(t, want["subscribe"], got, raw)
	}
	_, _, err := QueryValues("subscribe=%zz", "subscribe")
	require.Error(t, err)
}

// FuzzQueryValues: wherever url.ParseQuery reads a query without error,
// QueryValues reads the same values of the parameter.
func FuzzQueryValues(f *testing.F) {
	for _, s := range []string{"subscribe=a&subscribe=b", "x=1&subscribe=%41", "subscribe", "subscrib%65=+", "a=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		want, perr := url.ParseQuery(raw)
		got, ok, err := QueryValues(raw, "subscribe")
		if perr != nil {
			return
		}
		require.NoError(t, err)
		_, present := want["subscribe"]
		require.Equal(t, present, ok)
		require.Equal(t, want["subscribe"], got)
	})
}
