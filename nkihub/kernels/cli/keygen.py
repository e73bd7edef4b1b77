"""``nkihub keygen``: make an Ed25519 key pair for signing published kernels."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("keygen", help="make a key pair for `nkihub publish --sign`")
    p.add_argument("--out", default="kernels-signing.key",
                   help="private key file to write (mode 0600; refused if it exists); the public key goes to OUT.pub")
    p.add_argument("--org", default="neuron", help="org the key will sign for (only used in the printed hint)")
    p.set_defaults(func=run)


def run(args) -> int:
    from nkihub.hub_client.signing import generate_key, key_id

    try:
        public = generate_key(args.out)
    except FileExistsError:
        raise FileExistsError(f"{args.out} exists; keygen never overwrites a key (choose another --out)") from None
    print(f"private key: {args.out} (keep it secret; sign with `nkihub publish PATH --sign {args.out}`)")
    print(f"public key:  {args.out}.pub  id {key_id(public)}")
    print(f"trust it:    export KERNELS_TRUSTED_KEYS={args.org}={public}")
    return 0
