// What a user of the phone app gets with it: the client kit it is built on.
@_exported import QuadPhoneKit
