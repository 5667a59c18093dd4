// What a user of the campus-day simulator gets with it: the phone app and its kit.
@_exported import QuadPhone
