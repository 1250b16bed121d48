// Package wire is what crosses the wire between presenced and its clients,
// as every module's handlers speak it: the one JSON error shape
// ({"error":{"code","message"}}, Error and ErrorHandler), strict decoding
// of request bodies and frames with nesting bounded before the decoder
// descends (StrictJSON, DecodeBody), and the envelope of every WebSocket
// protocol (Envelope, EventFrame, ErrorFrame).
package wire
