// Package wiretest fills values of wire types for tests: every field set, each to a
// value of its own, so that a test comparing two forms of a value (a package's own
// type and its wire type, the JSON before and after a change) sees a field that is
// dropped, and two fields that are swapped.
package wiretest

import (
	"fmt"
	"reflect"
	"time"
)

// Fill sets every field reachable from ptr (a pointer) to a value that is not zero:
// numbers count up in the order the fields are met (1, 2, …), strings are "s" and the
// count, booleans true, a slice gets one item and a map one entry, pointers are
// allocated, and a time.Time is that many seconds past 2026-01-01 UTC. Two types with
// the same fields in the same order get the same values.
func Fill(ptr any) {
	v := reflect.ValueOf(ptr)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		panic(fmt.Sprintf("wiretest.Fill of %T: want a non-nil pointer", ptr))
	}
	n := 0
	fill(v.Elem(), &n)
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fill(v reflect.Value, n *int) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		*n++
		v.Set(reflect.ValueOf(epoch.Add(time.Duration(*n) * time.Second)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0), n)
	case reflect.Map:
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, n)
		fill(e, n)
		v.Set(reflect.MakeMap(v.Type()))
		v.SetMapIndex(k, e)
	case reflect.String:
		*n++
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		*n++
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		*n++
		v.SetUint(uint64(*n))
	case reflect.Float32, reflect.Float64:
		*n++
		v.SetFloat(float64(*n) + 0.5)
	default:
		panic(fmt.Sprintf("wiretest.Fill: no value for a %s", v.Type()))
	}
}
