package testenv

import (
	"reflect"
	"testing"
	"time"
)

// Filled returns a T with every exported field set, recursively, to a
// non-zero value (strings "s", numbers 7, true, one element in each
// slice and map, a fixed time): a conversion or an encoding that forgets
// a field shows when its output is compared with such a value.
func Filled[T any](t testing.TB) T {
	t.Helper()
	var v T
	fill(t, reflect.ValueOf(&v).Elem())
	return v
}

func fill(t testing.TB, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem())
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i))
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k)
		fill(t, e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(7)
	case reflect.Interface:
		v.Set(reflect.ValueOf("s"))
	default:
		t.Fatalf("testenv.Filled: cannot fill a %s", v.Type())
	}
}
